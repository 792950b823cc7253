"""GPU kernel models, each following the source of the kernel it describes; their constants are
fitted on measured kernel tables. Importing this package registers every GPU kernel form
(kernels/base.py); a family's candidates keep this order."""

from . import (  # noqa: F401  (registration)
    attention,
    collectives,
    elementwise,
    fa3_decode,
    gemm,
    gemm_cutlass,
    trtllm_decode,
)
