"""`krakenlm sim serve`: a real trace excerpt end to end, byte-identical output for a seed,
and bad input as one `error:` line with exit code 2 and nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fuzz_parsers import cli_one_line_or_success

from krakenlm.cli import main

TRACES = Path(__file__).parent / "data" / "traces"
BASE = ["sim", "serve", "--model", "gpt3-1.3b", "--system", "h100-80gb-x8",
        "--max-num-batched-tokens", "1024", "--max-num-seqs", "32"]


def _run(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    out = capsys.readouterr()
    return info.value.code, out.out, out.err


def test_serve_an_azure_excerpt_as_json(capsys):
    code, out, err = _run(BASE + ["--trace", str(TRACES / "azure_conv_head.csv"), "--json",
                                  "--slo-ttft-s", "1", "--slo-tpot-s", "0.05", "--skip-long"],
                          capsys)
    assert code == 0, err
    # one prompt of 2221 tokens is beyond gpt3-1.3b's 2048: dropped with a warning
    assert "warning: dropped 1 of 20 requests longer than gpt3-1.3b's context" in err
    report = json.loads(out)
    s = report["summary"]
    assert s["requests"] == 19
    assert s["ttft_s"]["p50"] > 0 and s["tpot_s"]["p99"] >= s["tpot_s"]["p50"]
    assert report["setup"]["scheduler"] == "vllm-v1" and report["setup"]["kv_cache"]["blocks"] > 0
    assert s["slo"]["attainment"] == 1.0
    assert s["cost"]["usd_per_million_output_tokens"] > 0


def test_the_output_directory_is_byte_identical_for_a_seed(tmp_path, capsys):
    argv = BASE + ["--trace", "synthetic", "--rate", "20", "--requests", "60", "--lengths",
                   "lognormal:300,40", "--replicas", "2", "--router", "least-loaded",
                   "--seed", "5"]
    for name in ("a", "b"):
        code, _, err = _run(argv + ["--out", str(tmp_path / name)], capsys)
        assert code == 0, err
    for f in ("requests.csv", "timeline.csv", "summary.json", "serve.png"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    rows = (tmp_path / "a" / "requests.csv").read_text().splitlines()
    assert rows[0].startswith("id,replica,arrival_s,queue_s,first_token_s,finish_s")
    assert len(rows) == 61


def test_an_overloaded_system_is_named(capsys):
    code, _, err = _run(BASE + ["--trace", "synthetic", "--rate", "2000", "--requests", "200",
                                "--lengths", "fixed:1000,50", "--json"], capsys)
    assert code == 0
    assert "warning: overloaded: the queue grows (mean wait" in err
    code, _, err = _run(BASE + ["--trace", "synthetic", "--rate", "2", "--requests", "60",
                                "--lengths", "fixed:100,10", "--json"], capsys)
    assert code == 0 and "overloaded" not in err


@pytest.mark.parametrize("extra,message", [
    (["--trace", "synthetic"], "--trace synthetic needs --rate"),
    (["--trace", "synthetic", "--rate", "0"], "--rate must be a positive number"),
    (["--trace", str(TRACES / "vidur_style.csv"), "--rate-scale", "0"],
     "--rate-scale must be a positive number"),
    (["--trace", str(TRACES / "vidur_style.csv"), "--router", "random"],
     "--router 'random' is not one of"),
    (["--trace", str(TRACES / "mooncake_conv_head.jsonl")], "exceed gpt3-1.3b's context"),
    (["--trace", str(TRACES / "vidur_style.csv"), "--software", "lmdeploy"],
     "no scheduler model for software 'lmdeploy'"),
    (["--trace", str(TRACES / "vidur_style.csv"), "--software", "sglang",
      "--schedule-policy", "lof"], "--schedule-policy 'lof' is not one of lpm, fcfs"),
    (["--trace", str(TRACES / "vidur_style.csv"), "--software", "trtllm",
      "--capacity-policy", "greedy"], "--capacity-policy 'greedy' is not one of"),
    (["--trace", str(TRACES / "azure_conv_head.csv"), "--software", "trtllm", "--skip-long"],
     "trtllm without chunked prefill runs a prompt in one step"),
    (["--trace", "missing.csv"], "trace missing.csv does not exist"),
    (["--trace", str(TRACES / "vidur_style.csv"), "--slo-tpot-s", "-1"],
     "--slo-tpot-s must be a positive"),
])
def test_bad_input_is_one_error_line_and_writes_nothing(tmp_path, extra, message):
    out = tmp_path / "out"
    err = cli_one_line_or_success(BASE + extra + ["--out", str(out)])
    assert err.strip().splitlines()[-1].startswith("error: ") and message in err, err
    assert not out.exists()


def test_a_profile_that_copies_the_kv_cache_is_refused(tmp_path):
    # the replay's step-time oracle writes the KV cache in place; a profile that appends by
    # copying the cache (Hugging Face's torch.cat era) would be timed as if it did not
    import krakenlm.simulator.constants.software_profiles as profiles

    text = (Path(profiles.__file__).parent / "vllm.yaml").read_text()
    yaml = tmp_path / "concat.yaml"
    yaml.write_text(text.replace("attention:\n", "attention:\n  kv_append: concat\n", 1))
    out = tmp_path / "out"
    err = cli_one_line_or_success(BASE + ["--trace", str(TRACES / "vidur_style.csv"),
                                          "--software", str(yaml), "--scheduler", "vllm-v1",
                                          "--out", str(out)])
    assert "(attention.kv_append: concat), which the serving replay does not model" in err, err
    assert not out.exists()


def test_weights_that_do_not_fit_are_one_error_line(tmp_path):
    err = cli_one_line_or_success(["sim", "serve", "--model", "llama2-70b", "--system",
                                   "h100-80gb-x8", "--tp", "1", "--trace",
                                   str(TRACES / "vidur_style.csv")])
    assert "leaves no KV cache on h100-80gb-x8 with --tp 1" in err


def test_any_architecture_and_a_hugging_face_config(tmp_path, capsys):
    """--arch kraken serves the parameter-matched Kraken of the model; --model takes a
    config.json (here a Hugging Face GPT-2 config written by hand)."""
    argv = ["sim", "serve", "--system", "h100-80gb-x8", "--trace", "synthetic", "--rate", "5",
            "--requests", "20", "--lengths", "fixed:128,8", "--max-num-batched-tokens", "512",
            "--max-num-seqs", "16", "--json"]
    code, out, err = _run(argv + ["--model", "gpt3-1.3b", "--arch", "kraken", "--tp", "2"],
                          capsys)
    assert code == 0, err
    setup = json.loads(out)["setup"]
    assert setup["arch"] == "kraken" and setup["model"] == "gpt3-1.3b as kraken"
    config = tmp_path / "gpt2" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"model_type": "gpt2", "n_layer": 4, "n_embd": 256,
                                  "n_head": 4, "n_positions": 1024, "vocab_size": 50257}))
    code, out, err = _run(argv + ["--model", str(config)], capsys)
    assert code == 0, err
    assert json.loads(out)["setup"]["model"] == "gpt2"


def test_capacity_search_brackets_the_largest_rate_meeting_the_slos(capsys):
    argv = BASE + ["--trace", "synthetic", "--rate", "4", "--requests", "120", "--lengths",
                   "fixed:512,32", "--capacity", "--slo-ttft-s", "0.05", "--slo-tpot-s",
                   "0.02", "--slo-percentile", "90", "--json"]
    code, out, err = _run(argv, capsys)
    assert code == 0, err
    found = json.loads(out)
    evaluations = found["evaluations"]
    passing = [e for e in evaluations if e["meets"]]
    failing = [e for e in evaluations if not e["meets"]]
    best = max(e["rate_scale"] for e in passing)
    assert found["rate_scale"] == best
    assert min(e["rate_scale"] for e in failing if e["rate_scale"] > best) / best - 1 <= 0.01
    at = found["at_capacity"]["summary"]
    assert at["ttft_s"]["p90"] <= 0.05 and at["tpot_s"]["p90"] <= 0.02


def test_capacity_search_needs_a_reachable_slo(tmp_path):
    argv = BASE + ["--trace", "synthetic", "--rate", "4", "--requests", "40", "--lengths",
                   "fixed:512,8", "--capacity"]
    assert "a capacity search needs an SLO" in cli_one_line_or_success(argv)
    err = cli_one_line_or_success(argv + ["--slo-ttft-s", "0.0001"])
    assert "no request rate meets the SLOs: at " in err
    assert "x the trace's rate the p99 TTFT is" in err


def test_kv_cache_dtype_reaches_the_sizing_and_the_report(capsys):
    argv = BASE + ["--trace", "synthetic", "--rate", "5", "--requests", "20", "--json"]
    reports = {}
    for kv in ("auto", "fp8_e4m3"):
        code, out, err = _run(argv + ["--kv-cache-dtype", kv], capsys)
        assert code == 0, err
        reports[kv] = json.loads(out)["setup"]
    auto, fp8 = reports["auto"], reports["fp8_e4m3"]
    assert (auto["kv_cache_dtype"], fp8["kv_cache_dtype"]) == ("fp16", "fp8")
    assert fp8["kv_cache"]["bytes_per_block"] * 2 == auto["kv_cache"]["bytes_per_block"]
    # the same free memory in half-size blocks: twice the blocks, give or take the rounding
    assert fp8["kv_cache"]["blocks"] in (2 * auto["kv_cache"]["blocks"],
                                         2 * auto["kv_cache"]["blocks"] + 1)


def test_kv_cache_dtype_in_the_python_api():
    from krakenlm.models import get_preset
    from krakenlm.serving.replay import serve
    from krakenlm.serving.traces import Request, Trace

    trace = Trace("two", (Request(0, 0.0, 100, 10), Request(1, 0.1, 100, 10)))
    report = serve(trace, get_preset("gpt3-1.3b"), "h100-80gb-x8", software="trtllm",
                   kv_cache_dtype="fp8")
    assert report.setup["kv_cache_dtype"] == "fp8"
    assert report.setup["kv_cache"]["bytes_per_block"] == \
        2 * 24 * 16 * 128 * 32  # K and V x 24 layers x 16 heads x 128 x 32 tokens, 1 byte


def test_kv_cache_dtype_reaches_pools_of_a_cluster(capsys):
    argv = ["sim", "serve", "--model", "gpt3-1.3b", "--replicas", "h100-80gb-x8:tp1:2",
            "--max-num-batched-tokens", "1024", "--max-num-seqs", "32", "--trace", "synthetic",
            "--rate", "5", "--requests", "20", "--json"]
    setups = {}
    for kv in ("auto", "fp8"):
        code, out, err = _run(argv + ["--kv-cache-dtype", kv], capsys)
        assert code == 0, err
        setups[kv] = json.loads(out)["setup"]
    assert setups["fp8"]["kv_cache_dtype"] == "fp8"
    assert setups["fp8"]["pools"][0]["kv_cache"]["bytes_per_block"] * 2 == \
        setups["auto"]["pools"][0]["kv_cache"]["bytes_per_block"]


def test_vllm_v0_chunked_prefill_from_the_command_line(capsys):
    """--chunked-prefill with V0: its 512-token default budget, prompts longer than the budget
    served in chunks (without it the same request is refused), and an explicit budget kept."""
    v0 = ["sim", "serve", "--model", "gpt3-1.3b", "--system", "h100-80gb-x8",
          "--software", "vllm-v0", "--trace", "synthetic", "--rate", "2", "--requests", "20",
          "--lengths", "fixed:1500,20", "--json"]
    code, out, err = _run(v0 + ["--chunked-prefill"], capsys)
    assert code == 0, err
    setup = json.loads(out)["setup"]
    assert setup["scheduler"] == "vllm-v0"
    assert setup["options"]["chunked_prefill"] is True
    assert setup["options"]["max_num_batched_tokens"] == 512
    code, out, err = _run(v0 + ["--chunked-prefill", "--max-num-batched-tokens", "768"], capsys)
    assert code == 0 and json.loads(out)["setup"]["options"]["max_num_batched_tokens"] == 768
    code, out, err = _run(v0 + ["--max-num-batched-tokens", "512"], capsys)
    assert code == 2 and "without chunked prefill runs a prompt in one step" in err
    assert "or pass --chunked-prefill" in err


def test_vllm_v0_multi_step_from_the_command_line(capsys):
    """--num-scheduler-steps reaches V0's options and the report; on another engine, with
    chunked prefill or on a cluster it is one error line."""
    v0 = ["sim", "serve", "--model", "gpt3-1.3b", "--system", "h100-80gb-x8", "--trace",
          "synthetic", "--rate", "4", "--requests", "20", "--lengths", "fixed:200,40", "--json"]
    code, out, err = _run(v0 + ["--software", "vllm-v0", "--num-scheduler-steps", "8"], capsys)
    assert code == 0, err
    report = json.loads(out)
    assert report["setup"]["options"]["num_scheduler_steps"] == 8
    assert report["summary"]["requests"] == 20
    for extra, message in (
            (["--software", "vllm", "--num-scheduler-steps", "8"], "multi-step scheduling"),
            (["--software", "vllm-v0", "--num-scheduler-steps", "8", "--chunked-prefill"],
             "Chunked prefill is not supported with multi-step"),
            (["--software", "vllm-v0", "--num-scheduler-steps", "8", "--replicas",
              "h100-80gb-x8:tp1:2"], "one pool of replicas"),
            (["--software", "vllm-v0", "--num-scheduler-steps", "0"], "at least 1")):
        code, out, err = _run(v0 + extra, capsys)
        assert code == 2 and err.startswith("error:") and message in err, (extra, err)
        assert err.count("\n") == 1


def test_vllm_v0_chunks_a_long_context_model_by_itself_and_says_so(capsys):
    """A 128K-context model on vllm-v0 runs chunked prefill at 512 tokens with a warning, as
    vLLM V0 does; --no-chunked-prefill keeps the one-step prompt; with multi-step the error
    names --no-chunked-prefill."""
    v0 = ["sim", "serve", "--model", "llama3.1-8b", "--system", "h100-80gb-x8", "--software",
          "vllm-v0", "--trace", "synthetic", "--rate", "4", "--requests", "10", "--lengths",
          "fixed:200,10", "--json"]
    code, out, err = _run(v0, capsys)
    assert code == 0, err
    options = json.loads(out)["setup"]["options"]
    assert options["chunked_prefill"] is True and options["max_num_batched_tokens"] == 512
    assert "turns chunked prefill on by itself for a context above 32K" in err
    code, out, err = _run(v0 + ["--no-chunked-prefill"], capsys)
    assert code == 0 and "32K" not in err
    options = json.loads(out)["setup"]["options"]
    assert options["chunked_prefill"] is False and options["max_num_batched_tokens"] == 131072
    code, out, err = _run(v0 + ["--num-scheduler-steps", "8"], capsys)
    assert code == 2 and err.splitlines()[-1].startswith("error:")
    assert "pass --no-chunked-prefill" in err
