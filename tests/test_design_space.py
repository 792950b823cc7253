"""Design-space exploration: knobs and their ranges, objectives, evaluate(), runners, search."""

import csv
import json

import pytest

from krakenlm.cli import main
from krakenlm.design import DesignSpaceError, Evaluator, Objective, ObjectiveError
from krakenlm.design.build import build_system
from krakenlm.design.knobs import design_key, space_from_dict, space_from_strings
from krakenlm.design.runner import read_table, run_designs
from krakenlm.design.search import pareto_front, search
from krakenlm.errors import KrakenError
from krakenlm.hardware import load_system
from krakenlm.models import get_preset
from krakenlm.simulator import simulate
from krakenlm.simulator.memory import memory_use

SMALL = Objective("throughput", "gpt3-13b", prompt_tokens=256, gen_tokens=8)


@pytest.fixture(scope="module")
def ev():
    return Evaluator("a100-80gb-x8", SMALL)


# ------------------------------------------------------------------------------- knobs
@pytest.mark.parametrize("spec, message", [
    (["cores=5000"], "outside the physical range 1..1024"),
    (["core=64"], "unknown knob 'core'"),
    (["memory=HBM9"], "is not one of"),
    (["memory=1:4"], "a choice knob takes a list"),
    (["cores=64:32"], "is empty"),
    (["lanes=2.5"], "must be a whole number"),
    (["cores"], "write name=values"),
])
def test_bad_knobs_are_named_errors(spec, message):
    with pytest.raises(DesignSpaceError, match=message):
        space_from_strings(spec)


def test_grid_size_and_keys_are_stable():
    space = space_from_dict({"cores": [54, 108], "memory": "HBM2e,DDR5", "lanes": [4]})
    designs = list(space.grid())
    assert space.size == 4 == len(designs)
    assert design_key({"cores": 54, "lanes": 4}) == design_key({"lanes": 4, "cores": 54.0})
    assert len({design_key(d) for d in designs}) == 4
    with pytest.raises(DesignSpaceError, match="a grid needs lists"):
        list(space_from_strings(["cores=32:64"]).grid())


def test_build_rescales_peaks_from_the_geometry():
    a100 = load_system("a100-80gb-x8")
    fp16 = a100.device.matrix_flops_per_s.fp16
    assert build_system(a100, {}).device.matrix_flops_per_s.fp16 == pytest.approx(fp16)
    half = build_system(a100, {"cores": 54})
    assert half.device.matrix_flops_per_s.fp16 == pytest.approx(fp16 / 2)
    assert half.device.vector_flops_per_s.fp32 == pytest.approx(19.5e12 / 2)
    # same MACs per cycle, reorganised: the same peak
    same = build_system(a100, {"cores": 27, "systolic_array": 32})
    assert same.device.matrix_flops_per_s.fp16 == pytest.approx(fp16)
    ddr = build_system(a100, {"memory": "DDR5", "memory_units": 16, "memory_gib_per_unit": 128})
    assert ddr.device.memory.capacity_bytes == 16 * 128 * 2**30
    assert ddr.device.memory.bandwidth_bytes_per_s == pytest.approx(16 * 38.4e9)
    bw = build_system(a100, {"memory_bandwidth_gb_per_s": 1000})
    assert bw.device.memory.bandwidth_bytes_per_s == 1e12
    assert bw.device.memory.capacity_bytes == a100.device.memory.capacity_bytes


# --------------------------------------------------------------------------- objectives
@pytest.mark.parametrize("kwargs, message", [
    ({"kind": "latency", "metric": "tpot", "gen_tokens": 1}, "needs at least 2 generated"),
    ({"model": "gpt-17"}, "unknown model"),
    ({"kind": "speed"}, "is not one of"),
    ({"prompt_tokens": 2048, "gen_tokens": 64}, "exceed"),
    ({"slo_s": -1.0}, "positive"),
])
def test_objectives_the_workload_cannot_produce(kwargs, message):
    with pytest.raises(ObjectiveError, match=message):
        Objective(**{"model": "gpt3-13b", **kwargs})


# ----------------------------------------------------------------------------- evaluate
def test_baseline_is_the_template_a100_and_scores_one(ev):
    base = ev.baseline
    assert base["feasible"] and base["perf_per_usd_vs_base"] == pytest.approx(1.0)
    # the baseline is the tile (template) model, not the measured-kernel A100 calibration
    r = simulate(get_preset("gpt3-13b"), "a100-80gb-x8", base["tp"], base["batch"], 256, 8,
                 mode="tile")
    assert base["e2e_s"] == pytest.approx(r.e2e_s, rel=1e-6)
    assert ev.evaluate({})["perf_per_usd_vs_base"] == pytest.approx(1.0)


def test_throughput_batch_is_the_largest_that_fits(ev):
    row = ev.evaluate({"tp": 1})
    a100 = load_system("a100-80gb-x8")
    cfg = get_preset("gpt3-13b")
    fits = memory_use(cfg, a100, 1, row["batch"], 256, 8)
    over = memory_use(cfg, a100, 1, row["batch"] + 1, 256, 8)
    assert fits.fits and not over.fits
    assert row["replicas"] == 8
    big = ev.evaluate({"tp": 1, "memory": "DDR5", "memory_units": 16})
    assert big["batch"] > row["batch"]


def test_slo_caps_the_batch_and_is_met():
    free = Evaluator("a100-80gb-x8", SMALL).evaluate({"tp": 8})
    slo = 0.5 * free["tpot_s"] + 0.5 * free["tpot_s"] * 0.6  # below the max-batch TPOT
    capped = Evaluator("a100-80gb-x8", Objective(
        "throughput", "gpt3-13b", 256, 8, metric="tpot", slo_s=slo)).evaluate({"tp": 8})
    assert capped["batch"] < free["batch"]
    assert capped["tpot_s"] <= slo


def test_infeasible_designs_carry_their_reason(ev):
    assert "reticle limit" in ev.evaluate({"cores": 300})["reason"]
    assert "die edge" in ev.evaluate({"cores": 54, "memory_units": 16})["reason"]
    assert "GiB per unit" in ev.evaluate({"memory": "HBM2e", "memory_gib_per_unit": 64})["reason"]
    tiny = Evaluator("a100-80gb-x8", Objective("throughput", "gpt3-175b", 256, 8))
    row = tiny.evaluate({"memory": "HBM2e", "memory_units": 1, "memory_gib_per_unit": 8})
    assert not row["feasible"] and "do not fit" in row["reason"]


def test_kraken_arch_sets_the_degree():
    ev = Evaluator("a100-80gb-x8", Objective("latency", "gpt3-13b", 512, 1, metric="ttft"),
                   with_baseline=False)
    row = ev.evaluate({"arch": "kraken", "tp": 4})
    assert row["feasible"] and row["tp"] == 4 and row["replicas"] == 2
    gpt = ev.evaluate({"arch": "gpt", "tp": 4})
    assert row["ttft_s"] != gpt["ttft_s"]


def test_impossible_base_objective_is_an_error():
    with pytest.raises(KrakenError, match="cannot run the objective"):
        Evaluator("a100-80gb-x8", Objective("latency", "gpt3-175b", 1024, 8, batch=4096))


# ------------------------------------------------------------------------------- runner
def _space():
    return space_from_dict({"cores": [54, 108], "memory": ["HBM2e", "DDR5"]})


def test_runner_streams_resumes_and_refuses_another_experiment(tmp_path):
    out = tmp_path / "t.csv"
    space = _space()
    first = run_designs(space.grid(), SMALL, knob_names=list(space.knobs), out=out,
                        progress=False)
    assert first.evaluated == 4 and len(read_table(out)) == 4
    again = run_designs(space.grid(), SMALL, knob_names=list(space.knobs), out=out,
                        progress=False)
    assert again.evaluated == 0 and again.skipped == 4 and len(again.rows) == 4
    # a kill mid-append leaves a torn line: it is dropped and that design re-evaluated
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:-1]) + lines[-1][:10])
    resumed = run_designs(space.grid(), SMALL, knob_names=list(space.knobs), out=out,
                          progress=False)
    assert resumed.evaluated == 1 and len(read_table(out)) == 4
    with open(out) as fh:
        assert len(list(csv.DictReader(fh))) == 4
    other = Objective("latency", "gpt3-13b", 256, 8)
    with pytest.raises(KrakenError, match="holds another experiment"):
        run_designs(space.grid(), other, knob_names=list(space.knobs), out=out, progress=False)
    meta = json.loads((tmp_path / "t.csv.meta.json").read_text())
    assert meta["objective"]["kind"] == "throughput"


def test_two_processes_give_the_same_rows():
    space = _space()
    one = run_designs(space.grid(), SMALL, knob_names=list(space.knobs), progress=False)
    two = run_designs(space.grid(), SMALL, knob_names=list(space.knobs), processes=2, chunk=1,
                      progress=False)
    by_key = {r["key"]: r for r in one.rows}
    assert len(two.rows) == 4
    for r in two.rows:
        assert r["perf"] == by_key[r["key"]]["perf"]


@pytest.mark.slow
def test_dask_backend_matches_local():
    pytest.importorskip("distributed")
    space = _space()
    local = run_designs(space.grid(), SMALL, knob_names=list(space.knobs), progress=False)
    dask = run_designs(space.grid(), SMALL, knob_names=list(space.knobs), backend="dask",
                       processes=1, progress=False)
    assert sorted((r["key"], r["perf"]) for r in dask.rows if r["feasible"]) == \
        sorted((r["key"], r["perf"]) for r in local.rows if r["feasible"])


# ------------------------------------------------------------------------------- search
def test_pareto_front_on_known_rows():
    rows = [{"feasible": True, "perf": 10, "system_usd": 5, "die_area_mm2": 5, "id": "a"},
            {"feasible": True, "perf": 9, "system_usd": 6, "die_area_mm2": 6, "id": "dominated"},
            {"feasible": True, "perf": 20, "system_usd": 9, "die_area_mm2": 5, "id": "b"},
            {"feasible": False, "perf": 99, "system_usd": 1, "die_area_mm2": 1, "id": "bad"}]
    assert {r["id"] for r in pareto_front(rows)} == {"a", "b"}


def test_search_is_seeded_and_returns_a_front(ev):
    pytest.importorskip("optuna")
    space = space_from_dict({"cores": {"low": 32, "high": 160}, "memory": ["HBM2e", "DDR5"],
                             "memory_units": {"low": 2, "high": 24}})
    a = search(space, ev, 12, seed=3, population=6)
    b = search(space, ev, 12, seed=3, population=6)
    assert [r["key"] for r in a["rows"]] == [r["key"] for r in b["rows"]]
    assert a["front"] and all(r["feasible"] for r in a["front"])
    assert all(r["reason"] for r in a["rows"] if not r["feasible"])


# ---------------------------------------------------------------------------------- CLI
def test_cli_bad_knob_is_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["sim", "explore", "--knob", "global_buffer_mib=1e6"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: knob global_buffer_mib")


def test_cli_explore_lists_rejected_designs(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["sim", "explore", "--knob", "cores=108,300", "--model", "gpt3-13b", "--prompt",
              "128", "--gen", "4", "--out", str(tmp_path / "t.csv")])
    assert exc.value.code in (0, None)
    out = capsys.readouterr().out
    assert "1 designs rejected" in out and "reticle limit" in out
    assert (tmp_path / "t.csv").is_file()


# ------------------------------------------------------------------- the table, resumed
def test_resume_reads_every_key_back_as_text(tmp_path):
    """Keys are hex digests: 477 cores hashes to all digits, 566 to digits around an "e" (a
    float to a number parser). Read back as numbers they never matched, so every resume
    evaluated and appended those designs again, and the Parquet copy failed on mixed types."""
    assert design_key({"cores": 477}) == "9555029436799798"
    assert design_key({"cores": 566}) == "2923e78196840413"
    space = space_from_dict({"cores": [477, 566, 108]})
    out = tmp_path / "t.csv"
    runs = [run_designs(space.grid(), SMALL, knob_names=["cores"], out=out, progress=False)
            for _ in range(3)]
    assert [r.evaluated for r in runs] == [3, 0, 0] and runs[2].skipped == 3
    rows = read_table(out)
    assert len(rows) == 3 and {r["key"] for r in rows} == {
        "9555029436799798", "2923e78196840413", design_key({"cores": 108})}
    if runs[2].parquet is not None:  # pyarrow installed
        import pyarrow.parquet as pq
        assert sorted(pq.read_table(runs[2].parquet).column("key").to_pylist()) == \
            sorted(r["key"] for r in rows)


def _table(tmp_path):
    out = tmp_path / "t.csv"
    run_designs(_space().grid(), SMALL, knob_names=["cores", "memory"], out=out, progress=False)
    return out


@pytest.mark.parametrize("damage, message", [
    (lambda t: t.with_name("t.csv.meta.json").write_text('{"base": '),
     r"t.csv.meta.json is not valid JSON \(Expecting value at line 1\)"),
    (lambda t: t.with_name("t.csv.meta.json").write_bytes(b"\x89PNG\r\n"),
     "t.csv.meta.json is not UTF-8 text"),
    (lambda t: t.write_bytes(t.read_bytes() + b"\xff\xfe\r\n"), "t.csv is not UTF-8 text"),
    (lambda t: t.write_text(t.read_text().replace(",True,", ",maybe,", 1), newline=""),
     r"t.csv line 2 is malformed \(feasible is 'maybe', not True or False\)"),
    (lambda t: t.write_text(t.read_text() + "54,abc,True\r\n", newline=""),
     r"t.csv line 6 is malformed \(3 cells where the header has 25\)"),
    (lambda t: t.write_text(t.read_text().replace(",tokens/s,", ",tokens/s,x,", 1), newline=""),
     r"t.csv line 2 is malformed \(26 cells where the header has 25\)"),
    (lambda t: t.write_text(t.read_text().replace("knob_cores", "knob_core", 1), newline=""),
     "its header is not the columns"),
], ids=["sidecar not JSON", "sidecar binary", "table binary", "bad bool", "short row",
        "long row", "header edited"])
def test_a_damaged_table_is_one_error_naming_the_line(tmp_path, damage, message):
    out = _table(tmp_path)
    damage(out)
    with pytest.raises(KrakenError, match=message):
        run_designs(_space().grid(), SMALL, knob_names=["cores", "memory"], out=out,
                    progress=False)


def test_a_malformed_row_is_one_line_on_the_command_line(tmp_path, capsys):
    out = tmp_path / "t.csv"
    argv = ["sim", "explore", "--knob", "cores=108", "--model", "gpt3-13b", "--prompt", "128",
            "--gen", "4", "--out", str(out)]
    with pytest.raises(SystemExit):
        main(argv)
    out.write_text(out.read_text().replace(",True,", ",yes,", 1), newline="")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err.splitlines()
    assert exc.value.code == 2 and len(err) == 1 and "line 2 is malformed" in err[0]


# ------------------------------------------------------------------------ the docs' space
def _doc_space(tmp_path, name: str):
    """The YAML block that docs/design-space.md introduces as `name`, as a file."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "design-space.md").read_text()
    after = doc.split(f"`{name}`", 1)[1]
    block = after.split("```yaml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / name
    path.write_text(block)
    return path


def test_the_docs_space_file_runs_with_explore(tmp_path, capsys):
    from krakenlm.design.knobs import load_space

    space = _doc_space(tmp_path, "space.yaml")
    assert load_space(space).size == 8
    with pytest.raises(SystemExit) as exc:
        main(["sim", "explore", "--space", str(space), "--model", "gpt3-13b", "--prompt", "128",
              "--gen", "4"])
    assert exc.value.code in (0, None)
    assert "evaluated 8" in capsys.readouterr().out


def test_the_docs_search_file_runs_with_search(tmp_path, capsys):
    pytest.importorskip("optuna")
    from krakenlm.design.knobs import Range, load_space

    search_file = _doc_space(tmp_path, "search.yaml")
    assert isinstance(load_space(search_file).knobs["cores"], Range)
    with pytest.raises(SystemExit) as exc:
        main(["sim", "search", "--space", str(search_file), "--trials", "2", "--population", "2",
              "--model", "gpt3-13b", "--prompt", "128", "--gen", "4", "--json"])
    assert exc.value.code in (0, None)
