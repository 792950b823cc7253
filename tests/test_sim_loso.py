"""Leave-one-source-out validation (calibration/loso.py) and the prediction intervals it feeds
(uncertainty.py)."""

import dataclasses
import math

import pytest

from krakenlm.cli import main
from krakenlm.models import get_preset
from krakenlm.simulator import simulate
from krakenlm.simulator.calibration.loso import coverage, validate_loso
from krakenlm.simulator.measurements.models import lineage, load_rows
from krakenlm.simulator.uncertainty import (
    LEVELS,
    Bands,
    Case,
    batch_band,
    between_source_variance,
    device_class,
    pooled_source_variance,
    read_residuals,
    residuals_path,
    student_t_quantile,
)


@pytest.fixture(scope="module")
def trtllm_h100_rows():
    """The three TensorRT-LLM sources on H100 (22 rows: fast to simulate)."""
    return [r for r in load_rows() if r.system == "h100-80gb-x8"
            and r.source in ("trtllm_v05", "trtllm_v090", "nim_llm_180")]


@pytest.fixture(scope="module")
def report(trtllm_h100_rows):
    return validate_loso(trtllm_h100_rows)


def test_a_left_out_source_never_moves_its_own_constants(trtllm_h100_rows, report):
    # Corrupt every measurement of trtllm_v090: its own predictions must not move (its fold
    # never fits on it), while the other sources' folds, which fit on it, do move.
    bad = [dataclasses.replace(r, measured_s=r.measured_s * 3)
           if r.source == "trtllm_v090" else r for r in trtllm_h100_rows]
    corrupted = validate_loso(bad)

    def predicted(rep, source):
        return [r["predicted_s"] for r in rep.rows if r["source"] == source]

    assert predicted(corrupted, "trtllm_v090") == pytest.approx(predicted(report, "trtllm_v090"))
    assert predicted(corrupted, "trtllm_v05") != pytest.approx(predicted(report, "trtllm_v05"))


def test_a_lineage_is_left_out_whole():
    # trtllm_v080 repeats trtllm_v090's grid (SOURCE_LINEAGE): corrupting v080 must not move
    # v090's predictions (its fold leaves v080 out too), while it moves v05's, which fit on it.
    rows = [r for r in load_rows() if r.system == "h100-80gb-x8"
            and r.source in ("trtllm_v05", "trtllm_v080", "trtllm_v090")]
    assert lineage("trtllm_v080") == lineage("trtllm_v090") != lineage("trtllm_v05")
    clean = validate_loso(rows)
    bad = validate_loso([dataclasses.replace(r, measured_s=r.measured_s * 3)
                         if r.source == "trtllm_v080" else r for r in rows])

    def predicted(rep, source):
        return [r["predicted_s"] for r in rep.rows if r["source"] == source]

    assert predicted(bad, "trtllm_v090") == pytest.approx(predicted(clean, "trtllm_v090"))
    assert predicted(bad, "trtllm_v05") != pytest.approx(predicted(clean, "trtllm_v05"))
    fold = next(f for f in clean.folds if f.source == "trtllm_v090")
    assert all("trtllm_v080" not in c.get("sources_fitted", []) for c in fold.constants)


def test_every_row_scored_once_with_its_slices(trtllm_h100_rows, report):
    assert len(report.rows) == len([r for r in trtllm_h100_rows if not r.anomalous])
    row = report.rows[0]
    assert row["device"] == "H100" and row["phase"] in ("prefill", "decode", "e2e")
    by_source = {g["source"]: g for g in report.by(("source",))}
    assert set(by_source) == {"trtllm_v05", "trtllm_v090", "nim_llm_180"}
    assert sum(g["n"] for g in by_source.values()) == report.overall()["n"]


def test_a_source_without_enough_other_rows_gets_the_sourced_constants():
    # only NIM's 4 rows and one other source's 3: fewer than 4 rows left when NIM is out
    h100 = [r for r in load_rows() if r.system == "h100-80gb-x8"]
    rows = [r for r in h100 if r.source == "nim_llm_180"] + \
        [r for r in h100 if r.source == "trtllm_v05"][:3]
    rep = validate_loso(rows)
    nim = next(f for f in rep.folds if f.source == "nim_llm_180")
    assert "sourced defaults" in nim.constants[0]["constants"]


def test_coverage_counts_each_source_with_the_others_residuals(report):
    cov = coverage(report)
    assert cov["level"] == 0.8
    assert cov["overall"]["n"] <= report.overall()["n"]
    assert 0 <= cov["overall"]["coverage_pct"] <= 100


def test_bands_need_two_sources_and_say_what_they_extrapolate():
    rows = [(Case("A100", 8, b, 512, "decode"), 0.1 * (i % 3), "s1")
            for i, b in enumerate([1] * 12)]
    assert Bands.from_residuals(rows).band(Case("A100", 8, 1, 512, "decode")) is None
    rows += [(Case("A100", 8, 1, 512, "decode"), -0.2, "s2")] * 10
    bands = Bands.from_residuals(rows)
    band = bands.band(Case("A100", 8, 1, 512, "decode"))
    assert band.low < 1 and band.n == 22 and band.extrapolation == ""
    far = bands.band(Case("A100", 4, 64, 8192, "decode"))
    assert "TP 4" in far.extrapolation and "batch 64" in far.extrapolation \
        and "prompt 8192" in far.extrapolation
    assert "no validated case on MI300X" in bands.band(Case("MI300X", 8, 1, 512, "decode")).extrapolation


def test_a_band_looked_up_again_is_the_one_a_fresh_table_gives():
    # two batch bands with different residuals, two sources each: their groups differ
    rows = [(Case("A100", 8, b, 512, "decode"), r + 0.05 * (i % 3), s)
            for b, r in ((1, 0.1), (16, -0.3)) for s in ("s1", "s2") for i in range(6)]
    bands = Bands.from_residuals(rows)
    cases = [Case("A100", 8, 1, 512, "decode"), Case("A100", 8, 1, 9000, "decode"),
             Case("A100", 8, 16, 512, "decode"), Case("A100", 8, 12, 700, "decode"),
             Case("A100", 8, 1, 512, "prefill")]
    for case in cases + cases:  # the second pass reads what the first worked out
        assert bands.band(case) == Bands.from_residuals(rows).band(case), case
    assert bands.band(cases[0]).extrapolation == "" and \
        "prompt 9000" in bands.band(cases[1]).extrapolation
    assert bands.band(cases[0]).low != bands.band(cases[2]).low
    assert bands.band(cases[4]).basis == "all cases"  # no prefill group: the widest one


def _synthetic_sources(seed, sources, rows, tau, sigma):
    """(case, residual, source) rows: each source's effect drawn with sd `tau`, each row's
    scatter around it with sd `sigma`."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for s in range(sources):
        effect = rng.normal(0, tau)
        out += [(Case("A100", 1, 1, 128, "decode"), float(effect + rng.normal(0, sigma)), f"s{s}")
                for _ in range(rows)]
    return out


def test_between_source_variance_recovers_a_known_one():
    # 200 sources, tau^2 = 0.04; the rows' own scatter (sd 0.3 over 5 rows: 0.018 in each
    # source mean) must be taken out, or the estimate would be ~0.058
    rows = _synthetic_sources(0, 200, 5, 0.2, 0.3)
    tau2, k = between_source_variance((r, s) for _, r, s in rows)
    assert k == 200 and tau2 == pytest.approx(0.04, abs=0.01)
    assert between_source_variance([(0.1, "one"), (0.3, "one")]) == (0.0, 1)


def test_intervals_cover_sources_left_out_at_their_nominal_level():
    # six sources whose bias dominates their rows' scatter (the shape of the public set): each
    # source scored by a band built without it; pooling the rows' residuals covers ~67 %
    import numpy as np

    case = Case("A100", 1, 1, 128, "decode")
    shares = []
    for seed in range(20):
        rows = _synthetic_sources(seed, 6, 20, 0.2, 0.05)
        for left_out in {s for _, _, s in rows}:
            band = Bands.from_residuals([r for r in rows if r[2] != left_out]).band(case)
            shares += [band.low <= math.exp(r) <= band.high for _, r, s in rows if s == left_out]
    assert 75 <= 100 * np.mean(shares) <= 88


def _sources_with_phase_effects(seed, sources, rows, tau, sigma):
    """Each source brings an independent effect (sd `tau`) to its prefill and to its decode
    rows: its overall mean averages the two, so it shows only half the variance a new source
    brings to a one-phase group."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for s in range(sources):
        for phase in ("prefill", "decode"):
            effect = rng.normal(0, tau)
            out += [(Case("A100", 1, 1, 128, phase), float(effect + rng.normal(0, sigma)),
                     f"s{s}") for _ in range(rows)]
    return out


def test_pooled_source_variance_is_taken_within_the_groups_of_a_level():
    # 200 sources with independent prefill and decode effects of variance 0.04: the overall
    # means show ~0.02, the phase groups the full 0.04
    rows = _sources_with_phase_effects(1, 200, 5, 0.2, 0.1)
    overall, _ = between_source_variance((r, s) for _, r, s in rows)
    assert overall == pytest.approx(0.02, abs=0.008)
    bands = Bands.from_residuals(rows)
    assert bands.level_var[("phase",)] == pytest.approx(0.04, abs=0.01)
    assert bands.level_var[()] == pytest.approx(overall, abs=1e-12)
    assert pooled_source_variance([{"a": [0.1, 0.1]}]) is None  # one source: nothing to pool
    # known value: two groups of two sources, means 0 / 0.2 and 0 / 0.4, no row scatter:
    # (0.02 + 0.08) / 2 degrees of freedom
    assert pooled_source_variance([{"a": [0.0, 0.0], "b": [0.2, 0.2]},
                                   {"a": [0.0, 0.0], "b": [0.4, 0.4]}]) == pytest.approx(0.05)


def test_intervals_cover_sources_whose_bias_differs_by_phase():
    # six sources, each biased differently in prefill and decode: the bands of a phase cover a
    # left-out source at the nominal level; with the overall means' variance they covered 73 %
    import numpy as np

    shares = []
    for seed in range(20):
        rows = _sources_with_phase_effects(seed, 6, 20, 0.2, 0.05)
        for left_out in {s for _, _, s in rows}:
            bands = Bands.from_residuals([r for r in rows if r[2] != left_out])
            for case, r, s in rows:
                if s == left_out:
                    band = bands.band(case)
                    shares.append(band.low <= math.exp(r) <= band.high)
    assert 75 <= 100 * np.mean(shares) <= 88


def _device_rows(device, effects, phase="decode"):
    """Five rows per source in one (device, TP 8, batch 1, `phase`) group; `effects`: source ->
    its mean ln(measured / predicted), rows scattered +-0.01 around it."""
    return [(Case(device, 8, 1, 512, phase), e + 0.01 * (i % 3 - 1), f"{device}-{s}")
            for s, e in effects.items() for i in range(5)]


def test_a_source_disagreeing_on_one_device_does_not_widen_another_devices_band():
    a100 = _device_rows("A100", {"a": 0.0, "b": 0.05, "c": -0.05})
    agreeing = _device_rows("MI300X", {"a": 0.0, "b": 0.02, "c": -0.02})
    disagreeing = _device_rows("MI300X", {"a": 0.0, "b": 0.02, "c": 0.9})
    calm, upset = Bands.from_residuals(a100 + agreeing), Bands.from_residuals(a100 + disagreeing)
    case = Case("A100", 8, 1, 512, "decode")
    assert upset.band(case) == calm.band(case)
    mi300x = Case("MI300X", 8, 1, 512, "decode")
    assert upset.band(mi300x).high / upset.band(mi300x).low > \
        3 * calm.band(mi300x).high / calm.band(mi300x).low
    # the disagreement still reaches the level's pooled variance, which a device without a
    # group of its own (here: the prefill of either, answered by the phase level) carries
    lv = LEVELS[0]
    assert upset.level_var[lv] > 10 * upset.class_var[(lv, "A100")][0]


def test_a_device_with_two_sources_takes_its_levels_variance():
    # two L40S sources that agree: a variance from them would be 0 on one degree of freedom;
    # the class borrows the level's, which the A100 sources' disagreement sets
    l40s = _device_rows("L40S", {"a": 0.0, "b": 0.01})
    a100 = _device_rows("A100", {"a": -0.3, "b": 0.0, "c": 0.3})
    bands = Bands.from_residuals(l40s + a100)
    assert (LEVELS[0], "L40S") not in bands.class_var and (LEVELS[0], "A100") in bands.class_var
    case = Case("L40S", 8, 1, 512, "decode")
    alone = Bands.from_residuals(l40s).band(case)
    assert bands.band(case).high / bands.band(case).low > 2 * alone.high / alone.low


def test_student_t_quantiles():
    # t tables: 0.9 quantile at 1 and 4 degrees of freedom, 0.95 at 10
    assert student_t_quantile(0.9, 1) == pytest.approx(3.0777, abs=1e-4)
    assert student_t_quantile(0.9, 4) == pytest.approx(1.5332, abs=1e-4)
    assert student_t_quantile(0.95, 10) == pytest.approx(1.8125, abs=1e-4)


def test_names_of_devices_and_bands():
    assert device_class("NVIDIA A100 80GB SXM4") == "A100"
    assert device_class("AMD Instinct MI300X") == "MI300X"
    assert device_class("NVIDIA L40S 48GB PCIe") == "L40S"
    assert [batch_band(b) for b in (1, 2, 8, 9, 32, 33)] == ["1", "2-8", "2-8", "9-32", "9-32",
                                                             "33+"]


def test_every_result_carries_its_interval():
    assert residuals_path().is_file() and len(read_residuals()) > 100
    r = simulate(get_preset("llama2-70b"), "a100-80gb-x8", tp=8, batch=8, prompt_tokens=512,
                 gen_tokens=16)
    iv = r.interval
    assert iv["level"] == 0.8 and iv["extrapolation"] is None
    lo, hi = iv["ttft_s"]
    assert lo < hi and math.isfinite(lo) and lo > 0
    assert r.to_json()["interval"] == iv


def test_sim_run_warns_when_it_extrapolates(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["sim", "run", "--system", "b200-x8", "--model", "llama2-7b", "--tp", "1",
              "--batch", "1", "--prompt", "128", "--gen", "4"])
    assert exc.value.code == 0
    captured = capsys.readouterr()
    assert "80% interval" in captured.out
    assert captured.err.count("warning: this query extrapolates") == 1
    assert "no validated case on B200" in captured.err


def test_loso_needs_the_models_level(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["sim", "validate", "--level", "operators", "--loso"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --loso scores whole models")


def _validate_models_csv(tmp_path, capsys, text):
    path = tmp_path / "rows.csv"
    path.write_text(text)
    with pytest.raises(SystemExit) as exc:
        main(["sim", "validate", "--level", "models", "--loso", "--models-csv", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1
    return err[0]


HEADER = ("source,model,hf_model,system,gpus,tp,framework,framework_version,dtype,batch,"
          "prompt_tokens,output_tokens,metric,{value},repeats,notes,split\n")


def test_a_measurement_file_in_seconds_names_the_unit(tmp_path, capsys):
    err = _validate_models_csv(tmp_path, capsys, HEADER.format(value="value_s") +
                               "x,llama2-7b,,a100-80gb-x8,1,1,trtllm,0.9,fp16,1,128,1,ttft,0.01,,,\n")
    assert err.startswith("error: ") and "missing column(s) value_ms" in err
    assert "found value_s: give the value in ms as value_ms" in err


def test_a_bad_row_in_a_measurement_file_names_its_line(tmp_path, capsys):
    err = _validate_models_csv(tmp_path, capsys, HEADER.format(value="value_ms") +
                               "x,llama2-7b,,a100-80gb-x8,1,1,trtllm,0.9,fp16,1,128,1,ttft,12,,,\n"
                               "x,llama2-7b,,a100-80gb-x8,1,1,trtllm,0.9,fp16,1,128,1,ttft,fast,,,\n")
    assert err.startswith("error: ") and "line 3" in err and "fast" in err


def test_a_missing_measurement_file_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["sim", "validate", "--level", "models", "--models-csv", str(tmp_path / "no.csv")])
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip() == f"error: --models-csv {tmp_path / 'no.csv'}: no such file"


def test_validate_loso_json_on_a_small_measurement_file(tmp_path, capsys):
    import csv
    import json

    from krakenlm.simulator.measurements.models import data_path

    with open(data_path("model_measurements.csv"), newline="") as fh:
        reader = csv.DictReader(fh)
        fields = reader.fieldnames
        keep = [r for r in reader if r["system"] == "h100-80gb-x8"
                and r["source"] in ("nim_llm_180", "trtllm_v05")]
    path = tmp_path / "rows.csv"
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(keep)
    with pytest.raises(SystemExit) as exc:
        main(["sim", "validate", "--level", "models", "--loso", "--models-csv", str(path),
              "--json"])
    assert exc.value.code == 0
    loso = json.loads(capsys.readouterr().out)["models_loso"]
    assert {g["source"] for g in loso["slices"]["source"]} == {"nim_llm_180", "trtllm_v05"}
    assert loso["overall"]["n"] == len(keep) and loso["coverage"]["level"] == 0.8
    assert {f["source"] for f in loso["folds"]} == {"nim_llm_180", "trtllm_v05"}


def test_splitwise_left_out_decode_pays_the_per_step_host_time_of_a_synchronous_engine():
    # Splitwise is the only source of its engine (vLLM 2023, no CUDA graphs), so left out it
    # runs on the profile's sourced host constants. Llama-2-70B's batch-1 decode on 8 A100s was
    # ~20 % too fast with the 1.5 ms per step of Vidur's newer engine; with the ~4 ms per-step
    # GPU bubble vLLM measured in its synchronous engine (issue #6854) it is ~14 % too fast
    # (the rest is the TP residual results-simulator.md describes).
    rows = [r for r in load_rows() if r.source == "splitwise" and r.system == "a100-80gb-x8"
            and r.model == "llama2-70b" and r.tp == 8 and r.metric == "tpot" and r.batch == 1
            and not r.anomalous][:4]
    rep = validate_loso(rows)
    assert len(rep.rows) == 4
    assert "sourced defaults" in rep.folds[0].constants[0]["constants"]
    assert -18 < rep.overall()["mean_signed_pct"] < 0
