"""Sources of measured kernel timings the simulator is calibrated and validated on.

* `aiconfigurator`: NVIDIA's measured kernel tables shipped in the `aiconfigurator-core`
  package (Apache-2.0): GEMM, context and generation attention, NCCL and custom collectives,
  quantisation kernels, per GPU and serving framework. Optional extra `krakenlm[calibrate]`.
* The LLMCompass measurement set (A100, MI210; `shared/data/measured`) is read by
  `krakenlm.simulator.measured`.
"""
