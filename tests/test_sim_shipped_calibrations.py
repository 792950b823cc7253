"""The shipped GPU calibrations: one per NVIDIA preset, and consistent with today's models.

With the `calibrate` extra installed (the test extra includes it), every shipped family is
re-scored on NVIDIA's real kernel tables and must reproduce the held-out error recorded in its
file: a kernel model changed without refitting its constants fails here.
"""

import pytest

from krakenlm.hardware import load_system
from krakenlm.simulator.constants import gpu_kernels as store

NVIDIA_PRESETS = ("a100-40gb-x8", "a100-80gb-x8", "a100-80gb-x4", "h100-80gb-x8", "h200-x8",
                  "b200-x8", "gb200-nvl72", "l40s-x8")


def test_shipped_entries_name_their_form_and_store_only_its_constants():
    # format 3: a form and its typed structure per entry, no structural switch among the
    # constants, no constant the form does not read, the last fit's command instead of a log
    from krakenlm.simulator.kernels.base import Setting

    switches = {"library", "tile_table", "weight_copies", "pack_gqa", "block_m", "kv_tile",
                "warm_l2", "decode_kernels", "q_tile_rows", "qgmma_residency", "fa3",
                "split_ctas_per_sm", "split_mha", "fa2_swap", "fa3_mma", "row_kernel",
                "kernel_route", "heat_s", "heat_gain"}
    for cal in store.shipped():
        assert "refits" not in cal.meta and cal.meta["command"].startswith("krakenlm sim")
        sysm = load_system(cal.meta["system"])
        for fw, info in cal.frameworks.items():
            for family, variants in info["families"].items():
                for variant, e in variants.items():
                    assert not set(e.params) & switches, (cal.device_key, fw, family, variant)
                    if family != "custom_all_reduce":  # its constants: the rows' kernels
                        reads = e.kernel.params(Setting(sysm, fw, variant), e.structure)
                        assert set(e.params) == {p.name for p in reads}, (fw, family, variant)


@pytest.mark.parametrize("system", NVIDIA_PRESETS)
def test_every_nvidia_preset_has_a_shipped_calibration(system):
    cal = store.for_device(load_system(system).device)
    assert cal is not None, system
    assert cal.entry("trtllm", "gemm", "bf16") is not None
    assert "aiconfigurator-core" in cal.meta["source"]


def test_gb200_is_not_mistaken_for_b200():
    assert store.for_device(load_system("gb200-nvl72").device).device_key == "GB200"
    assert store.for_device(load_system("b200-x8").device).device_key == "B200"


def test_shipped_constants_reproduce_their_recorded_held_out_error():
    pytest.importorskip("aiconfigurator_core")
    pytest.importorskip("pyarrow")
    from krakenlm.simulator.validation.kernels import validate_kernels

    report = validate_kernels()
    assert not report.skipped, report.skipped
    assert len(report.groups) > 100
    by_key = {(c.device_key): c for c in store.shipped()}
    for g in report.groups:
        entry = by_key[g["device"]].entry(g["framework"], g["family"], g["variant"])
        recorded = entry.fit
        assert g["n"] == recorded["n_fit"] + recorded["n_held_out"], g
        # constants are stored to 6 significant digits: the error moves in the 2nd decimal at most
        assert g["mape_held_out_pct"] == pytest.approx(recorded["mape_held_out_pct"], abs=0.1), g


def test_shipped_nccl_constants_time_every_size_on_every_group():
    # a protocol fitted on no row once left GB200's 8-GPU all-gather of 16 MiB at 4e43 s
    import numpy as np

    from krakenlm.simulator.kernels.base import Setting
    from krakenlm.simulator.kernels.gpu import collectives as C

    sizes = 2.0 ** np.arange(10, 31)
    for system in ("a100-80gb-x8", "h100-80gb-x8", "h200-x8", "b200-x8", "gb200-nvl72"):
        sysm = load_system(system)
        e = store.for_device(sysm.device).entry("nccl", "nccl", "any")
        for op in C.OPS:
            for n in (2, 4, 8):
                cols = {"op": np.array([op] * len(sizes), object),
                        "n": np.full(len(sizes), float(n)), "bytes": sizes}
                t = e.kernel.predict(Setting(sysm, "nccl", "any"), cols, e.params, e.structure)
                # at most 1 s for 1 GiB, and never below the floor: a time, not a runaway constant
                assert np.all((t > 1e-6) & (t < 1.0)), (system, op, n, t.max())


@pytest.mark.parametrize("system", ("a100-80gb-x8", "h100-80gb-x8", "h200-x8", "b200-x8",
                                    "gb200-nvl72", "l40s-x8"))
def test_shipped_constants_are_within_their_devices_ceilings(system):
    # per-CTA streaming rates and cache speed-ups once ran to 1e19-1e156 where a term did not
    # bind; the fits now carry the device's ceilings and every shipped entry must respect them
    from krakenlm.simulator.kernels.base import Setting

    sysm = load_system(system)
    cal = store.for_device(sysm.device)
    checked = 0
    for framework in cal.frameworks:
        for family in ("generation_attention", "elementwise"):
            for variant in cal.variants(framework, family):
                entry = cal.entry(framework, family, variant)
                params = entry.kernel.params(Setting(sysm, framework, variant), entry.structure)
                uppers = {p.name: p.upper for p in params if p.upper is not None}
                for name, upper in uppers.items():
                    if name in entry.params:
                        # stored to 6 significant digits: at the ceiling reads back <= 5e-6 above
                        assert entry.params[name] <= upper * (1 + 1e-5), (framework, family,
                                                                         variant, name)
                        checked += 1
                assert set(entry.params) <= {p.name for p in params}  # only what the form reads
    assert checked > 0
