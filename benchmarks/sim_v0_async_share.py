"""The per-sequence host time vLLM V0 keeps between its steps once output processing is
asynchronous (0.6.0 on): the `vllm-v0` profile's `host.per_sequence_async_s` (source VSA).

    python benchmarks/sim_v0_async_share.py

Vidur profiles the CPU work of each step of a vLLM-derived engine per phase and batch
(microsoft/vidur@0633efaee2826c47b16741e57df0476b58136714 data/profiling/a100/cpu_overheads.csv,
medians in ms; the columns below are copied from that file, rows of one model and TP degree).
vLLM pull request #7049 (the asynchronous output processor, released in 0.6.0) runs
`_process_model_outputs` while the GPU runs the next forward pass; scheduling, input preparation
and the sampler stay between the steps. So the per-sequence time a 0.6.0 or later step still
carries is the least-squares slope over the batch of SCHEDULE + SAMPLER_E2E + PREPARE_INPUTS_E2E;
PROCESS_MODEL_OUTPUTS is the share that moved beside the GPU. Together they are the 0.10 ms per
sequence of the profile's `per_sequence_s` (vLLM issue #6913, source VS).
"""

from __future__ import annotations

import numpy as np

# batch, SCHEDULE_MEDIAN, SAMPLER_E2E_MEDIAN, PREPARE_INPUTS_E2E_MEDIAN,
# PROCESS_MODEL_OUTPUTS_MEDIAN (ms), rounded to 5 decimals from the file
VIDUR_A100_MEDIANS_MS = {
    "Llama-2-7B TP 1": [
        (8, 0.16513, 0.88781, 0.29317, 0.62438), (16, 0.27832, 0.94459, 0.43911, 1.13542),
        (24, 0.38175, 0.95600, 0.53633, 1.63395), (32, 0.57984, 1.12637, 0.67099, 2.24566),
        (40, 0.61693, 1.07573, 0.79215, 2.65117), (48, 0.74156, 1.16300, 0.91485, 3.23167),
        (56, 0.83946, 1.24732, 1.03977, 3.60745), (64, 0.95218, 1.37026, 1.16300, 4.10826)],
    "Llama-2-7B TP 2": [
        (8, 0.17853, 1.15604, 0.38098, 0.67909), (16, 0.31068, 1.21046, 0.48627, 1.34851),
        (24, 0.44709, 1.31127, 0.61324, 1.88325), (32, 0.51120, 1.28531, 0.70398, 2.27732),
        (40, 0.72542, 1.66030, 0.84282, 3.00116), (48, 0.89673, 1.79499, 0.98314, 3.60745),
        (56, 1.02327, 1.69723, 1.09090, 4.09186), (64, 1.14683, 1.77358, 1.23244, 4.49515)],
    "Llama-2-7B TP 4": [
        (8, 0.18323, 1.16532, 0.37494, 0.79057), (16, 0.31506, 1.26744, 0.49115, 1.31390),
        (24, 0.44353, 1.33242, 0.59155, 1.81303), (32, 0.56836, 1.38680, 0.73125, 2.39887),
        (40, 0.72688, 1.67364, 0.88250, 2.96536), (48, 0.92774, 2.01980, 1.02737, 3.61467),
        (56, 1.07573, 1.89458, 1.13997, 4.14126), (64, 1.22507, 1.96011, 1.29563, 4.66926)],
    "Llama-2-70B TP 4": [
        (8, 0.18068, 1.17939, 0.37494, 0.78741), (16, 0.31317, 1.26998, 0.47855, 1.35662),
        (24, 0.45248, 1.34313, 0.61201, 1.89458), (32, 0.52048, 1.41765, 0.70680, 2.30943),
        (40, 0.71820, 1.72461, 0.88073, 2.97130), (48, 0.92404, 2.03603, 1.06077, 3.60024),
        (56, 1.09966, 1.94838, 1.27252, 4.25885), (64, 1.22998, 1.94838, 1.31653, 4.71618)],
}
# The profile takes TP 1, one value for every TP degree. The file's TP 2 and 4 rows give 46-54 us
# (their sampler and scheduling grow with the number of workers); no source says why, and the
# profile's TP-dependent host work is per step (`tp_step_s`), not per sequence.
SHIPPED = "Llama-2-7B TP 1"


def slopes_us(rows: list[tuple[float, ...]]) -> dict[str, float]:
    """Least-squares slope over the batch, in us per sequence, of each phase and of the
    phases that stay between the steps ("between steps") and move beside the GPU."""
    a = np.array(rows, float)
    batch = a[:, 0]
    names = ("schedule", "sampler", "prepare inputs", "process outputs")
    out = {name: float(np.polyfit(batch, a[:, j + 1], 1)[0] * 1e3)
           for j, name in enumerate(names)}
    out["between steps"] = out["schedule"] + out["sampler"] + out["prepare inputs"]
    out["total"] = out["between steps"] + out["process outputs"]
    return out


def main() -> None:
    print("| rows | schedule | sampler | prepare inputs | between steps | process outputs "
          "| total |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, rows in VIDUR_A100_MEDIANS_MS.items():
        s = slopes_us(rows)
        print(f"| {name} | " + " | ".join(f"{s[k]:.1f}" for k in (
            "schedule", "sampler", "prepare inputs", "between steps", "process outputs",
            "total")) + " |")
    shipped = slopes_us(VIDUR_A100_MEDIANS_MS[SHIPPED])["between steps"]
    print(f"\nus per sequence per step; per_sequence_async_s = {shipped * 1e-6:.1e} s ({SHIPPED})")


if __name__ == "__main__":
    main()
