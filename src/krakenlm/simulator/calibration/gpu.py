"""`krakenlm sim calibrate --source aiconfigurator`: fit every kernel family of one GPU.

The datasets (measurements/kernel_tables.py: the rows of each framework, family and variant,
implausible rows dropped) are fitted with every kernel form the registry offers for them, on
the fit half of their shapes, and scored on the other (calibration/fit.py); the winning form,
its structure, constants and harness conditions are stored with their fit statistics
(constants/gpu_kernels.py). `--family` refits some families of an existing file and keeps the
rest; `--variant` narrows that to some of their entries (a dtype), so a change that concerns one
entry costs that entry's fit. The file's meta records the command and date of the last fit.
"""

from __future__ import annotations

from typing import Callable

from ..constants.gpu_kernels import DeviceCalibration, Entry, today
from ..measurements import aiconfigurator as aic
from ..measurements.kernel_tables import FAMILIES, Dataset, datasets, device_key, with_nccl
from .fit import FitError, FitResult, fit_dataset

# Tables that contradict NVIDIA's own published measurements of the same system are not fitted;
# the simulator then times those families with the preset's template models, and the reason is
# recorded in the calibration file. L40S: the tables' 8-GPU all-reduce moves 8 MB in 12.8 ms
# (0.65 GB/s, i.e. through host memory without peer-to-peer), yet TensorRT-LLM 0.9's published
# Llama-2-70B TP 8 TTFT at 128 tokens is 70 ms in all, where its 160 all-reduces of 2 MB would
# take ~420 ms at the tables' speed (validation_data/model_measurements.csv, trtllm_v090).
UNREPRESENTATIVE = {
    "l40s-x8": (("nccl", "custom_all_reduce"),
                "the tables' 8-GPU all-reduce (0.65 GB/s at 8 MB: a machine without peer-to-peer) "
                "contradicts TensorRT-LLM's published L40S TP-8 latencies; collectives use the "
                "preset's template model"),
}


def calibrate(system_name: str, frameworks: list[str] | None = None, root: str | None = None,
              command: str = "", base: DeviceCalibration | None = None,
              progress: Callable[[Dataset, FitResult | None, str], None] | None = None,
              families: list[str] | None = None,
              variants: list[str] | None = None) -> DeviceCalibration:
    """Fit every family; `base` (an existing file's content) keeps frameworks not refitted.
    With `families`, only those are refitted and every other entry of `base` stays as it was
    (a model change in one family then costs one family's fit, not the device's); `variants`
    narrows that to some variants (dtypes) of them, e.g. the one entry a change concerns."""
    if families:
        unknown = [f for f in families if f not in FAMILIES]
        if unknown:
            raise FitError(f"unknown family {unknown[0]!r}; use one of {', '.join(FAMILIES)}")
        if base is None:
            raise FitError("refitting some families needs the calibration file they belong to; "
                           "calibrate every family first (without --family)")
    system, sets = datasets(system_name, frameworks, root)
    key = device_key(system_name)
    cal = base if base is not None else DeviceCalibration(key)
    if families:
        sets = [ds for ds in sets if ds.family in families
                and (not variants or ds.variant in variants)]
        entry = cal.entry("nccl", "nccl", "any")
        if entry is not None:  # unless refitted too: the file's NCCL takes the hand-off
            sets = with_nccl(sets, entry.params, entry.structure)
        return _refit_families(system_name, cal, sets, command, progress)
    results: list[tuple[Dataset, FitResult]] = []
    excluded_families, why = UNREPRESENTATIVE.get(system_name, ((), ""))
    for i, ds in enumerate(sets):  # fit everything first: a failure leaves `base` untouched
        if ds.family in excluded_families:
            if progress:
                progress(ds, None, f"not fitted: {why}")
            continue
        try:
            result = fit_dataset(ds, system_name)
        except FitError as exc:
            if progress:
                progress(ds, None, str(exc))
            continue
        _keep(results, sets, i, ds, result, progress)
    if not results:
        raise FitError(f"nothing could be fitted for {system_name}")
    for fw in {ds.framework for ds, _ in results} | ({"nccl"} & set(excluded_families)):
        cal.frameworks.pop(fw, None)  # a refit (or excluded) framework is replaced whole
    for ds, result in results:
        cal.put(ds.framework, ds.version, ds.family, ds.variant, _entry(ds, result))
    device = aic.read_gemm(system.name, next(d.framework for d in sets if d.framework != "nccl"),
                           root=root).device
    cal.meta.update({
        "system": system_name,
        "device_measured": device,
        "source": f"aiconfigurator-core {aic.package_version()} (NVIDIA, Apache-2.0): "
                  f"systems/data/{aic.aic_system(system.name, root)}",
        "command": command,
        "created": today(),
        **({"excluded": f"{', '.join(excluded_families)}: {why}"} if excluded_families else {}),
        "split": "rows hashed by shape (CRC-32 of the shape key): even hashes are fitted, odd "
                 "ones held out; fits use a seeded sample of at most 4000 fit-half shapes",
    })
    return cal


def _keep(results: list[tuple[Dataset, FitResult]], sets: list[Dataset], i: int, ds: Dataset,
          result: FitResult,
          progress: Callable[[Dataset, FitResult | None, str], None] | None) -> None:
    """Keep a fit; a fitted NCCL entry times the framework hand-offs of the sets after it."""
    results.append((ds, result))
    if ds.family == "nccl":
        sets[i + 1:] = with_nccl(sets[i + 1:], result.params, result.structure)
    if progress:
        progress(ds, result, "")


def _entry(ds: Dataset, result: FitResult) -> Entry:
    return Entry(result.form, result.structure, result.params, result.harness,
                 result.summary(), ds.notes + result.notes)


def _refit_families(system_name: str, cal: DeviceCalibration, sets: list[Dataset],
                    command: str,
                    progress: Callable[[Dataset, FitResult | None, str], None] | None
                    ) -> DeviceCalibration:
    """Replace the entries of `sets` in `cal`, all fitted before any is replaced."""
    excluded_families, why = UNREPRESENTATIVE.get(system_name, ((), ""))
    results: list[tuple[Dataset, FitResult]] = []
    for i, ds in enumerate(sets):
        if ds.family in excluded_families:
            if progress:
                progress(ds, None, f"not fitted: {why}")
            continue
        result = fit_dataset(ds, system_name)  # a FitError leaves the file as it was
        _keep(results, sets, i, ds, result, progress)
    if not results:
        raise FitError(f"nothing to refit for {system_name}: the tables have none of these "
                       "families for the frameworks asked")
    # entry by entry: other variants of a family (e.g. the Vidur-fitted streaming kernels next
    # to the tables' quantiser under `elementwise`) stay
    for ds, result in results:
        cal.put(ds.framework, ds.version, ds.family, ds.variant, _entry(ds, result))
    cal.meta.pop("refits", None)
    cal.meta.update(command=command, created=today())
    return cal
