"""The whole-model sources added to measurements/data/model_measurements.csv in issue 22 (item 2):
each parses, its rows are well-formed and traceable, and the scorer sees every row it should."""

import csv
import json
import re
from decimal import Decimal

import pytest

from krakenlm.cli import main
from krakenlm.hardware import load_system
from krakenlm.models import PRESETS
from krakenlm.simulator.measurements.models import data_path, load_rows, row_software

# source -> (rows, rows flagged ANOMALY, the software profile its rows run on, locator in notes)
NEW_SOURCES = {
    "fastertransformer_gpt": (55, 0, "trtllm", "07fdd2fc6aa46f961f304d5f3791efad016e38a3"),
    "vllm_pr2192": (2, 0, "vllm-v0", "pull request #2192"),
    "vllm_issue16300": (9, 0, "vllm-v0", "vllm-project/vllm issue #16300"),
    "vllm_project_latency": (7, 0, "vllm-v0", "benchmark_latency.py"),
    "llm_inference_bench": (391, 19, "vllm-v0", "4de4e8723b661851bf01bd2ec16c0a0d1216fa3d"),
    "llm_inference_bench_mi300x": (479, 21, "vllm-v0", "4de4e8723b661851bf01bd2ec16c0a0d1216fa3d"),
    "trtllm_v080": (40, 0, "trtllm", "'All data was generated using version 0.8.0'"),
    "optimum_benchmark_llamas": (26, 0, "eager", "huggingface/optimum-benchmark@"),
    "optimum_benchmark_mistrals": (10, 0, "eager", "huggingface/optimum-benchmark@"),
}
# the metrics of a new source's rows (e2e unless named here)
METRICS = {"trtllm_v080": {"ttft"}, "optimum_benchmark_llamas": {"ttft", "e2e"},
           "optimum_benchmark_mistrals": {"ttft", "e2e"}}


def _csv_rows(source: str) -> list[dict[str, str]]:
    with open(data_path("model_measurements.csv"), newline="") as fh:
        return [r for r in csv.DictReader(fh) if r["source"] == source]


@pytest.mark.parametrize("source", sorted(NEW_SOURCES))
def test_a_new_source_parses_with_its_row_count(source):
    n, anomalous, software, _ = NEW_SOURCES[source]
    rows = [r for r in load_rows() if r.source == source]
    assert len(rows) == n
    assert sum(r.anomalous for r in rows) == anomalous
    assert {row_software(r) for r in rows} == {software}


@pytest.mark.parametrize("source", sorted(NEW_SOURCES))
def test_a_new_source_rows_are_well_formed_and_located(source):
    locator = NEW_SOURCES[source][3]
    rows = _csv_rows(source)
    setups = set()
    for r in rows:
        # a preset, or an architecture built from its Hugging Face config (SOURCES.md table)
        assert r["model"] in PRESETS or (not r["model"] and r["hf_model"])
        assert load_system(r["system"])
        assert r["gpus"] == r["tp"] and int(r["tp"]) in (1, 2, 4, 8)
        assert r["metric"] in METRICS.get(source, {"e2e"}) and Decimal(r["value_ms"]) > 0
        assert r["split"] == "held_out", "a new source is never fitted on"
        assert locator in r["notes"]
        setup = (r["system"], r["model"], r["hf_model"], r["tp"], r["batch"], r["prompt_tokens"],
                 r["output_tokens"], r["framework_version"], r["metric"])
        assert setup not in setups, f"duplicate setup {setup}"
        setups.add(setup)


@pytest.mark.parametrize("source", ["llm_inference_bench", "llm_inference_bench_mi300x"])
def test_llm_inference_bench_rows_match_the_printed_latency_and_throughput(source):
    """Each row's value is the source's Latency (s) x 1000, and the source's own Throughput
    column (batch x (input + output) / Latency) checks the transcription digit by digit."""
    rows = _csv_rows(source)
    assert rows
    for r in rows:
        m = re.search(r"Latency (\S+) s x 1000 -> ms \(Throughput (\S+) =", r["notes"])
        latency_s, throughput = Decimal(m.group(1)), float(m.group(2))
        assert Decimal(r["value_ms"]) == latency_s * 1000
        batch, length = int(r["batch"]), int(r["prompt_tokens"])
        assert int(r["output_tokens"]) == length
        assert batch * 2 * length / float(latency_s) == pytest.approx(throughput, rel=1e-12)


def test_fastertransformer_rows_are_the_guide_tables():
    rows = _csv_rows("fastertransformer_gpt")
    by_model = {}
    for r in rows:
        by_model.setdefault(r["model"], []).append(r)
    assert {m: len(v) for m, v in by_model.items()} == {
        "gpt3-175b": 13, "gpt3-6.7b": 14, "gpt3-1.3b": 14, "gpt2-350m": 14}
    assert {r["tp"] for r in by_model["gpt3-175b"]} == {"8"}
    first = next(r for r in by_model["gpt3-175b"] if r["batch"] == "1" and r["prompt_tokens"] == "128")
    assert first["value_ms"] == "488.86" and first["output_tokens"] == "8"


def test_optimum_benchmark_rows_match_the_printed_latency_and_throughput():
    """Each value is the report's forward.latency or generate.latency (s) x 1000, and the report's
    own throughput column checks the transcription: forward = batch / latency (samples/s),
    generate = batch x 512 new tokens / latency (tokens/s), both printed to 3 significant digits."""
    rows = _csv_rows("optimum_benchmark_llamas")
    assert {(r["model"], r["batch"]) for r in rows if r["metric"] == "e2e"} == \
        {("llama2-7b", str(b)) for b in (1, 2, 4, 8, 16, 32, 64)} | \
        {("llama2-13b", str(b)) for b in (1, 2, 4, 8, 16, 32)}
    for r in rows:
        m = re.search(r"(forward|generate)\.latency (\S+) s x 1000 -> ms \(\1\.throughput (\S+) ",
                      r["notes"])
        kind, latency_s, throughput = m.group(1), Decimal(m.group(2)), float(m.group(3))
        assert Decimal(r["value_ms"]) == latency_s * 1000
        assert r["prompt_tokens"] == "256"
        assert (kind, r["metric"]) in (("forward", "ttft"), ("generate", "e2e"))
        batch = int(r["batch"])
        new_tokens = 512 if kind == "generate" else 1
        assert int(r["output_tokens"]) == new_tokens
        assert batch * new_tokens / float(latency_s) == pytest.approx(throughput, rel=6e-3)


def test_optimum_benchmark_mistral_rows_match_their_experiment_files():
    """Each Mistral-7B row is its own experiment's forward.latency or generate.latency (s) x 1000,
    the experiment directory named in the notes is the row's batch, and the file's throughput
    column checks the transcription (forward = batch / latency, generate = batch x 1000 / latency,
    3 significant digits)."""
    rows = _csv_rows("optimum_benchmark_mistrals")
    assert {(r["batch"], r["metric"]) for r in rows} == \
        {(str(b), m) for b in (1, 2, 4, 8, 16) for m in ("ttft", "e2e")}
    for r in rows:
        batch = int(r["batch"])
        assert f"fp16-batch_size({batch})-sequence_length(512)-new_tokens(1000)" in r["notes"]
        m = re.search(r"(forward|generate)\.latency (\S+) s x 1000 -> ms \(\1\.throughput (\S+) ",
                      r["notes"])
        kind, latency_s, throughput = m.group(1), Decimal(m.group(2)), float(m.group(3))
        assert Decimal(r["value_ms"]) == latency_s * 1000
        assert (r["model"], r["prompt_tokens"], r["dtype"]) == ("mistral-7b", "512", "fp16")
        assert (kind, r["metric"]) in (("forward", "ttft"), ("generate", "e2e"))
        new_tokens = 1000 if kind == "generate" else 1
        assert int(r["output_tokens"]) == new_tokens
        assert batch * new_tokens / float(latency_s) == pytest.approx(throughput, rel=6e-3)


def test_trtllm_v080_rows_are_the_low_latency_tables_of_v090s_grid():
    """TensorRT-LLM 0.8.0's batch-1 TTFT tables: the same (GPU, model, input) grid as the 0.9.0
    source, output length 1, and a few values as printed."""
    rows = _csv_rows("trtllm_v080")
    grid = {(r["system"], r["hf_model"], r["prompt_tokens"]) for r in rows}
    v090 = _csv_rows("trtllm_v090")
    assert grid == {(r["system"], r["hf_model"], r["prompt_tokens"]) for r in v090}
    assert {(r["batch"], r["output_tokens"], r["framework_version"]) for r in rows} == \
        {("1", "1", "0.8.0")}
    value = {(r["system"], r["hf_model"], r["prompt_tokens"]): (r["tp"], r["value_ms"])
             for r in rows}
    llama70 = "meta-llama/Llama-2-70b-hf"
    assert value["a100-80gb-x8", llama70, "128"] == ("8", "35.6")
    assert value["l40s-x8", llama70, "2048"] == ("8", "708.7")
    assert value["h200-x8", "tiiuae/falcon-180B", "2048"] == ("8", "120.8")
    assert {r["dtype"] for r in rows if r["system"] == "a100-80gb-x8"} == {"fp16"}
    assert {r["dtype"] for r in rows if r["system"] != "a100-80gb-x8"} == {"fp8"}


def test_vllm_issue16300_rows_are_the_printed_cells():
    """Each row is its printed latency (s) x 1000 at its own TP and batch, and the printed
    throughput (rounded by the issue's author) is batch x 200 output tokens / latency to 3 %.
    The two batch-128 cells at TP 4 / 8 come from a mirror that drops the cell's <br/>."""
    rows = _csv_rows("vllm_issue16300")
    cells = set()
    for r in rows:
        m = re.search(r"batch-size (\d+), column 'tp=(\d+)': printed '(\S+)s(?:<br/>| )(\S+)tok/s'",
                      r["notes"])
        batch, tp, latency_s, throughput = int(m[1]), int(m[2]), Decimal(m[3]), float(m[4])
        assert (batch, tp) == (int(r["batch"]), int(r["tp"]))
        assert Decimal(r["value_ms"]) == latency_s * 1000
        assert (r["prompt_tokens"], r["output_tokens"], r["model"]) == ("1", "200", "qwen2.5-32b")
        assert batch * 200 / float(latency_s) == pytest.approx(throughput, rel=0.03)
        cells.add((batch, tp))
    assert cells == {(b, tp) for b in (1, 16, 128) for tp in (2, 4, 8)}


def test_vllm_project_latency_rows_are_the_printed_means():
    """Each row is its page's printed mean latency (ms) or the docs page's printed 'Avg latency'
    (s) x 1000, at the workload the page prints (32 + 128 tokens; batch 8 in CI, 1 in the docs)."""
    rows = _csv_rows("vllm_project_latency")
    seen = set()
    for r in rows:
        m = re.search(r"printed 'Mean latency \(ms\)' (\S+) ", r["notes"])
        if m:
            assert Decimal(r["value_ms"]) == Decimal(m[1]) and r["batch"] == "8"
            test = re.search(r"test '(latency_llama(8|70)B_tp(\d))'", r["notes"])
            assert (r["model"], r["tp"]) == ({"8": "llama3-8b", "70": "llama3-70b"}[test[2]], test[3])
        else:
            m = re.search(r"printed 'Avg latency: (\S+) seconds'", r["notes"])
            assert Decimal(r["value_ms"]) == Decimal(m[1]) * 1000 and r["batch"] == "1"
        assert (r["prompt_tokens"], r["output_tokens"], r["metric"]) == ("32", "128", "e2e")
        seen.add((r["system"], r["model"], r["batch"]))
    assert len(seen) == 7


@pytest.mark.parametrize("source", sorted(NEW_SOURCES))
def test_the_scorer_scores_every_usable_row_of_a_new_source(source, tmp_path, capsys):
    n, anomalous, _, _ = NEW_SOURCES[source]
    rows = _csv_rows(source)
    path = tmp_path / f"{source}.csv"
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with pytest.raises(SystemExit) as exc:
        main(["sim", "validate", "--level", "models", "--models-csv", str(path), "--json"])
    assert exc.value.code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["skipped"] == []
    assert out["models"]["overall"]["n"] == n - anomalous
