"""Calibration from measured kernel tables: the adapter, the fit/held-out split, the stored
constants, and the CLI's errors. Synthetic tables in aiconfigurator's layout (aic_fixture)."""

import dataclasses
import json
import math
import shutil

import numpy as np
import pytest
from aic_fixture import ELEMENTWISE_PARAMS, GEMM_PARAMS, gemm_shapes, write_tables

from krakenlm.cli import main
from krakenlm.hardware import load_system
from krakenlm.hardware.identity import Identity
from krakenlm.simulator.calibration.fit import FitError, fit_model
from krakenlm.simulator.constants import gpu_kernels as store
from krakenlm.simulator.kernels.base import Setting
from krakenlm.simulator.kernels.gpu import gemm
from krakenlm.simulator.measurements import aiconfigurator as aic
from krakenlm.simulator.measurements.split import fit_half

pytest.importorskip("pyarrow")
H100 = load_system("h100-80gb-x8")
BF16 = Setting(H100, "trtllm", "bf16")
PARAMS = gemm.CUBLAS.params(BF16, gemm.CublasStructure())


def predict(c, p):
    return gemm.CUBLAS.predict(BF16, c, p, gemm.CublasStructure())


@pytest.fixture
def tables(tmp_path):
    return write_tables(tmp_path / "tables")


@pytest.fixture(scope="module")
def cli_calibration(tmp_path_factory):
    """One full `sim calibrate` of the synthetic H100 tables through the CLI (a fit of every
    family, the slow part of this module): (the file it wrote, what it printed). Tests copy
    the file before changing it."""
    import contextlib
    import io

    root = tmp_path_factory.mktemp("cli-calibration")
    out = root / "cal.yaml"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), pytest.raises(SystemExit) as exc:
        main(["sim", "calibrate", "--source", "aiconfigurator", "--system", "h100-80gb-x8",
              "--tables", str(write_tables(root / "tables")), "--output", str(out)])
    assert exc.value.code == 0
    return out, printed.getvalue()


def test_adapter_normalises_units_and_keeps_the_fastest_kernel(tables):
    t = aic.read_gemm("h100-80gb-x8", "trtllm", root=str(tables))
    assert len(t) == len(gemm_shapes())  # the slower duplicate of the first shape is gone
    assert any("fastest kernel per shape" in n for n in t.notes)
    m, n, k = 1, 512, 512
    i = np.flatnonzero((t.columns["m"] == m) & (t.columns["n"] == n) & (t.columns["k"] == k))[0]
    expected = predict({"m": np.array([m]), "n": np.array([n]), "k": np.array([k])},
                       GEMM_PARAMS)[0]
    assert t.latency_s[i] == pytest.approx(expected)  # ms in the file, seconds here
    assert set(t.columns["dtype"]) == {"bf16"}


def test_adapter_errors_name_what_is_missing(tmp_path, tables):
    with pytest.raises(aic.CalibrationSourceError, match="no gemm tables for framework 'vllm'"):
        aic.read_gemm("h100-80gb-x8", "vllm", root=str(tables))
    with pytest.raises(aic.CalibrationSourceError, match="systems with tables"):
        aic.read_gemm("mi210-x4", "trtllm", root=str(tables))
    with pytest.raises(aic.CalibrationSourceError, match="the tables have no system 'a100_sxm'"):
        aic.read_gemm("a100-80gb-x8", "trtllm", root=str(tables))
    # a table whose columns are not the expected ones
    import pyarrow as pa
    import pyarrow.parquet as pq
    bad = tmp_path / "bad" / "data" / "h100_sxm" / "gemm" / "trtllm" / "1.0" / "gemm_perf.parquet"
    bad.parent.mkdir(parents=True)
    pq.write_table(pa.table({"m": [1], "n": [2], "latency": [0.1]}), bad)
    with pytest.raises(aic.CalibrationSourceError, match=r"missing column\(s\) \['k', 'gemm_dtype'"):
        aic.read_gemm("h100-80gb-x8", "trtllm", root=str(tmp_path / "bad"))


def test_split_is_by_shape_and_stable():
    keys = gemm.shape_key({"m": [1, 1, 2], "n": [3, 3, 4], "k": [5, 5, 6]})
    half = fit_half(keys)
    assert half[0] == half[1]  # the same shape is always in the same half
    assert list(half) == list(fit_half(keys))


@pytest.fixture(scope="module")
def gemm_fit(tmp_path_factory):
    """The synthetic GEMM table and its fit from the default start (two tests use the same
    fit)."""
    t = aic.read_gemm("h100-80gb-x8", "trtllm",
                      root=str(write_tables(tmp_path_factory.mktemp("gemm-fit") / "tables")))
    return t, fit_model("gemm", predict, PARAMS, t.columns, t.latency_s, gemm.shape_key(t.columns))


def test_fit_recovers_known_constants_and_scores_the_other_half(gemm_fit):
    t, r = gemm_fit
    assert r.n_fit + r.n_held_out == len(t)
    assert r.mape_held_out < 1.0
    assert r.params["floor_s"] == pytest.approx(GEMM_PARAMS["floor_s"], rel=0.05)


def test_fit_never_sees_the_held_out_half(gemm_fit):
    t, a = gemm_fit
    held = ~fit_half(gemm.shape_key(t.columns))
    corrupted = t.latency_s.copy()
    corrupted[held] *= 7.0  # garbage in the held-out half must not move the constants
    b = fit_model("gemm", predict, PARAMS, t.columns, corrupted, gemm.shape_key(t.columns))
    assert a.params == b.params
    assert b.mape_held_out == pytest.approx(100 * (1 - 1 / 7), rel=1e-3)  # and it is scored


def test_screened_starts_never_see_the_held_out_half(tables):
    t = aic.read_gemm("h100-80gb-x8", "trtllm", root=str(tables))
    held = ~fit_half(gemm.shape_key(t.columns))
    corrupted = t.latency_s.copy()
    corrupted[held] *= 7.0
    starts = [{}, *gemm.FIT_STARTS]  # more than fit.POLISH: screened on a fit-half sample
    a = fit_model("gemm", predict, PARAMS, t.columns, t.latency_s,
                  gemm.shape_key(t.columns), starts=starts)
    b = fit_model("gemm", predict, PARAMS, t.columns, corrupted,
                  gemm.shape_key(t.columns), starts=starts)
    assert a.params == b.params
    assert a.mape_held_out < 1.0


def test_too_few_points_is_a_fit_error():
    cols = {"m": np.array([1, 2, 3]), "n": np.array([4, 5, 6]), "k": np.array([7, 8, 9])}
    n = len(PARAMS)
    with pytest.raises(FitError, match=f"fitting {n} constants needs at least {4 * n}"):
        fit_model("gemm", predict, PARAMS, cols, np.ones(3) * 1e-5, gemm.shape_key(cols))


def test_calibration_file_round_trip_and_device_lookup(tmp_path, cli_calibration):
    cal = store.load_file(cli_calibration[0])  # calibration.gpu.calibrate's, via the CLI
    assert cal.device_key == "H100"
    assert cal.meta["command"].startswith("krakenlm sim calibrate") and "refits" not in cal.meta
    e = cal.entry("trtllm", "elementwise", "any")
    # the tables' quantiser was made by the row form: it is fitted with that form, typed
    assert e.form == "elementwise/row" and "row_bandwidth" in e.params
    g = cal.entry("trtllm", "gemm", "bf16")
    assert g.form == "gemm/cublas" and g.structure == gemm.CublasStructure(power_limit=False)
    assert g.harness["weight_copies"] in (0, 5) and "quantize_efficiency" not in g.params
    assert e.params["memory_efficiency"] == pytest.approx(ELEMENTWISE_PARAMS["memory_efficiency"],
                                                          rel=0.02)
    assert e.fit["mape_held_out_pct"] < 1.0
    path = store.save(cal, tmp_path / "H100.yaml")
    assert not list(tmp_path.glob(".H100.yaml.*"))  # no temporary file left behind
    again = store.load_file(path)
    assert again.entry("trtllm", "gemm", "bf16").params == pytest.approx(
        cal.entry("trtllm", "gemm", "bf16").params, rel=1e-5)
    assert again.entry("trtllm", "gemm", "bf16").structure == g.structure
    assert "structure: {power_limit: false}" in path.read_text()
    # the calibration a device declares, never one whose key is part of its name
    assert store.for_device(load_system("gb200-nvl72").device).device_key == "GB200"
    assert store.for_device(load_system("b200-x8").device).device_key == "B200"
    assert store.for_device(load_system("a100-40gb-x8").device).device_key == "A100"
    undeclared = dataclasses.replace(load_system("h100-80gb-x8").device,
                                     name="NVIDIA H100 PCIe 80GB", identity=Identity())
    assert store.for_device(undeclared) is None


def test_malformed_calibration_file_is_a_clear_error(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("meta: {format: 1, device_key: X}\n")
    with pytest.raises(store.GpuCalibrationError, match="re-run `krakenlm sim calibrate`"):
        store.load_file(p)
    p.write_text("frameworks: {}\n")
    with pytest.raises(store.GpuCalibrationError, match="no meta section"):
        store.load_file(p)
    entry = ("meta: {format: 3, device_key: X}\nframeworks: {trtllm: {version: '1', families: "
             "{gemm: {bf16: %s}}}}\n")
    for body, message in (
            ("{form: gemm/cutlass, params: {floor_s: 1}}", "no kernel form 'gemm/cutlass'"),
            ("{form: elementwise/row, params: {floor_s: 1}}", "times elementwise, not gemm"),
            ("{form: gemm/cublas, structure: {power_limit: 1}, params: {floor_s: 1}}",
             "structure power_limit must be true or false"),
            ("{form: gemm/cublas, structure: {tiles: 3}, params: {floor_s: 1}}",
             "structure has no field 'tiles'"),
            ("{form: gemm/cublas, params: {floor_s: .inf}}", "finite numbers")):
        p.write_text(entry % body)
        with pytest.raises(store.GpuCalibrationError, match=message) as exc:
            store.load_file(p)
        assert "\n" not in str(exc.value)


def test_format_2_is_refused_and_converted_with_the_same_constants(tmp_path, capsys):
    from krakenlm.simulator.constants import format2

    p = tmp_path / "H100.yaml"
    p.write_text("""meta: {format: 2, device_key: H100, system: h100-80gb-x8, command: first,
  created: '2026-01-01', refits: [{command: second, created: '2026-02-01'}]}
frameworks:
  sglang:
    version: 0.5.14
    families:
      gemm:
        fp8:
          params: {floor_s: 3.2e-06, compute_efficiency: 0.885, memory_efficiency: 0.81,
            l2_efficiency: 0.27, memory_latency_s: 1.9e-06, wave_overhead_s: 1.1e-06,
            k_step_latency_s: 3.4e-08, quantize_efficiency: 0.55, quant_cta_s: 1.9e-09,
            oob_row_s: 3.3e-10, power_efficiency: 0.7, heat_s: 0.0083, heat_gain: 0.95,
            library: 2.0, tile_table: 3.0, weight_copies: 6.0}
          fit: {n_fit: 1}
      custom_all_reduce:
        any:
          params: {oneshot_latency_s: 4.1e-06, handoff_4: 4194304.0}
""")
    with pytest.raises(store.GpuCalibrationError, match=r"calibration format 2, this krakenlm "
                       r"reads format 3; convert it with `python -m "
                       r"krakenlm\.simulator\.constants\.format2 ") as exc:
        store.load_file(p)
    assert "\n" not in str(exc.value)
    assert format2.main([str(p)]) == 0
    assert "format 3, 2 entries" in capsys.readouterr().out
    cal = store.load_file(p)
    assert cal.meta["command"] == "second" and cal.meta["created"] == "2026-02-01"
    assert "refits" not in cal.meta
    e = cal.entry("sglang", "gemm", "fp8")
    assert (e.form, e.structure.tile_table) == ("gemm/sglang-cutlass-fp8", 3)
    assert e.harness == {"weight_copies": 6, "heat_s": 0.0083, "heat_gain": 0.95}
    assert e.params["oob_row_s"] == 3.3e-10 and "library" not in e.params
    assert "heat_s" not in e.params and "tile_table" not in e.params
    c = cal.entry("sglang", "custom_all_reduce", "any")
    assert c.structure.route == "handoff" and c.structure.handoff_bytes == ((4, 4194304.0),)
    assert dict(c.params) == {"oneshot_latency_s": 4.1e-06}
    # converting twice is an error, not a second conversion
    assert format2.main([str(p)]) == 2
    assert "not a GPU calibration file of format 2" in capsys.readouterr().err


def test_calibrate_cli_writes_merges_and_fails_cleanly(tables, tmp_path, capsys, monkeypatch,
                                                       cli_calibration):
    written, printed = cli_calibration
    assert "wrote" in printed
    out = tmp_path / "cal.yaml"
    shutil.copy(written, out)
    data = store.load_file(out)
    assert data.meta["command"].startswith("krakenlm sim calibrate --source aiconfigurator")
    for argv, message in (
            (["--system", "h100-80gb-x8", "--framework", "sglang"], "no sglang kernels"),
            (["--system", "mi210-x4"], "no aiconfigurator tables for system 'mi210-x4'"),
            ([], "needs --system"),
            (["--system", "h100-80gb-x8", "--framework", "tgi"], "unknown framework 'tgi'")):
        with pytest.raises(SystemExit) as exc:
            main(["sim", "calibrate", "--source", "aiconfigurator", "--tables", str(tables),
                  "--output", str(out), *argv])
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and message in err and "\n" not in err
    # a source that is not installed: say how to install it
    monkeypatch.delenv("KRAKENLM_AIC_TABLES", raising=False)
    monkeypatch.setattr(aic, "package_root", lambda: (_ for _ in ()).throw(
        aic.CalibrationSourceError("the calibration source 'aiconfigurator' is not installed; "
                                   + aic.INSTALL_HINT)))
    with pytest.raises(SystemExit) as exc:
        main(["sim", "calibrate", "--source", "aiconfigurator", "--system", "h100-80gb-x8",
              "--output", str(out)])
    assert exc.value.code == 2
    assert "pip install 'krakenlm[calibrate]'" in capsys.readouterr().err
    assert json.dumps(store.load_file(out).to_dict())  # the earlier file is untouched


def test_package_root_without_the_extra_says_how_to_install(monkeypatch):
    import builtins
    real_import = builtins.__import__

    def fake(name, *args, **kwargs):
        if name == "aiconfigurator_core":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(aic.CalibrationSourceError, match=r"pip install 'krakenlm\[calibrate\]'"):
        aic.package_root()


def test_parameter_transforms_stay_in_range_far_from_the_start():
    from krakenlm.simulator.kernels.params import Param

    frac = Param("e", "fraction", 0.5, "")
    # a Nelder-Mead step can wander far out in logit space; the value saturates, never raises
    assert frac.from_free(-5000.0) == pytest.approx(0.0, abs=1e-300)
    assert frac.from_free(5000.0) == 1.0
    assert frac.from_free(frac.to_free(0.25)) == pytest.approx(0.25)


def test_ceiling_holds_a_constant_below_its_physical_limit():
    from krakenlm.simulator.kernels.params import Param

    bw = Param("sm_bandwidth", "positive", 6e10, "", upper=2.5e11)
    # well below the ceiling the transform is the plain log scale (a fit's steps keep size)
    assert bw.to_free(1e9) == pytest.approx(math.log(1e9), abs=0.01)
    assert bw.from_free(bw.to_free(1e11)) == pytest.approx(1e11)
    # however far a simplex step goes, the value approaches the ceiling and never passes it
    assert bw.from_free(1e9) <= 2.5e11 and bw.from_free(1e9) == pytest.approx(2.5e11)
    assert bw.from_free(bw.to_free(1e20)) <= 2.5e11  # an old unphysical value is clipped
    assert bw.at_bound(bw.from_free(100.0)) and not bw.at_bound(1e11)
    with pytest.raises(ValueError, match="ceiling"):
        Param("f", "fraction", 0.5, "", upper=0.9)


def test_generation_fit_carries_the_devices_ceilings():
    from krakenlm.simulator.kernels.gpu import trtllm_decode as T

    setting = Setting(H100, "trtllm", "bf16")
    params = {p.name: p for p in T.TRTLLM_XQA.params(setting, T.XqaStructure())}
    # 128 B/clk per SM at 1.83 GHz with the 1.1 boost margin; L2 14.1 TB/s over 3.35 TB/s HBM
    assert params["sm_bandwidth"].upper == pytest.approx(128 * 1.83e9 * 1.1)
    assert params["l2_gain"].upper == pytest.approx(7680 * 1.83e9 * 1.1 / 3.35e12 - 1)
    assert params["floor_s"].upper is None


def test_trtllm_generation_fit_also_starts_below_the_ceilings():
    from krakenlm.simulator.kernels.gpu import attention as A
    from krakenlm.simulator.kernels.gpu import trtllm_decode as T

    setting = Setting(H100, "trtllm", "bf16")
    (start,) = T.TRTLLM_XQA.starts(setting, T.XqaStructure())
    assert T.TRTLLM_DISCRETE.starts(setting, T.DiscreteStructure()) == (start,)
    ceilings = A.generation_ceilings(H100.device)
    assert start["sm_bandwidth"] == pytest.approx(0.5 * ceilings["sm_bandwidth"])
    assert start["l2_gain"] == pytest.approx(0.5 * ceilings["l2_gain"])
    params = {p.name: p for p in T.TRTLLM_XQA.params(setting, T.XqaStructure())}
    assert all(v < params[k].upper for k, v in start.items())  # inside the bounded range
    vllm = Setting(H100, "vllm", "bf16")
    assert A.FLASH_SPLITKV.starts(vllm, A.SplitKVStructure()) == ()


def test_stored_constants_keep_byte_thresholds_exact(tmp_path):
    from krakenlm.simulator.constants.gpu_kernels import DeviceCalibration, Entry, load_file, save
    from krakenlm.simulator.kernels.gpu.collectives import CustomStructure

    cal = DeviceCalibration("H100", {"system": "h100-80gb-x8"})
    handoff = CustomStructure("handoff", ((4, 4194304.0), (8, 1.5e6 + 0.25)))
    cal.put("trtllm", "1", "custom_all_reduce", "any",
            Entry("custom_all_reduce/framework", handoff,
                  {"oneshot_latency_s": 4.098181753291323e-06}))
    back = load_file(save(cal, tmp_path / "H100.yaml")).entry("trtllm", "custom_all_reduce", "any")
    assert back.structure == handoff  # 4 MiB exactly, not 4194300
    assert back.params["oneshot_latency_s"] == 4.09818e-06


def test_calibrate_family_refits_only_that_family(tables, tmp_path, capsys, cli_calibration):
    out = tmp_path / "cal.yaml"
    base = ["sim", "calibrate", "--source", "aiconfigurator", "--system", "h100-80gb-x8",
            "--tables", str(tables), "--output", str(out)]
    # --family on a file that does not exist yet: nothing to keep, say what to run first
    with pytest.raises(SystemExit) as exc:
        main([*base, "--family", "elementwise"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "calibrate every family first" in err and "\n" not in err
    assert not out.exists()
    shutil.copy(cli_calibration[0], out)  # what `main(base)` writes: a fit of every family
    full = store.load_file(out)
    fitted_elementwise = dict(full.entry("trtllm", "elementwise", "any").params)
    # mark both families' constants, then refit one: only that one comes back from the tables
    full.entry("trtllm", "gemm", "bf16").params["floor_s"] = 1.0
    full.entry("trtllm", "elementwise", "any").params["floor_s"] = 1.0
    store.save(full, out)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main([*base, "--family", "elementwise"])
    assert exc.value.code == 0
    refit = store.load_file(out)
    assert refit.entry("trtllm", "gemm", "bf16").params["floor_s"] == 1.0
    assert refit.entry("trtllm", "elementwise", "any").params == pytest.approx(fitted_elementwise)
    assert refit.meta["command"].endswith("--family elementwise")  # the last fit, no log
    assert "refits" not in refit.meta
    capsys.readouterr()
    # --variant narrows a family refit to some of its entries: elementwise has only "any",
    # the tables have no FP8 GEMM, and a variant without its family is a usage error
    full.entry("trtllm", "elementwise", "any").params["floor_s"] = 1.0
    store.save(full, out)
    with pytest.raises(SystemExit) as exc:
        main([*base, "--family", "elementwise", "--family", "gemm", "--variant", "any"])
    assert exc.value.code == 0
    refit = store.load_file(out)
    assert refit.entry("trtllm", "gemm", "bf16").params["floor_s"] == 1.0  # not this variant
    assert refit.entry("trtllm", "elementwise", "any").params == pytest.approx(fitted_elementwise)
    assert refit.meta["command"].endswith("--family gemm --variant any")
    capsys.readouterr()
    for argv, message in ((["--family", "softmax"], "unknown family 'softmax'"),
                          (["--family", "nccl"], "nothing to refit"),
                          (["--family", "gemm", "--variant", "fp8"], "nothing to refit"),
                          (["--variant", "bf16"], "give the family too")):
        with pytest.raises(SystemExit) as exc:
            main([*base, *argv])
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and message in err and "\n" not in err
    assert store.load_file(out).to_dict() == refit.to_dict()  # failed refits wrote nothing
