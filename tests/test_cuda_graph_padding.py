"""A step that replays a CUDA graph runs at the graph's captured size (`Graphs.padded_tokens`,
the profiles' `graphs.pad_*` read from vLLM's and SGLang's code): its layers at the padded
token count, its attention, LM head and host work at the real one, in `Simulator.run` and in
the serving step-time oracle alike."""

import dataclasses
import json

import pytest

from krakenlm.models import get_preset
from krakenlm.serving.step_time import StepTimer
from krakenlm.simulator import Simulator
from krakenlm.simulator.constants.software import SoftwareError, load_software, \
    profile_from_dict

MODEL = get_preset("llama3-8b")


def unpadded(name: str):
    p = load_software(name)
    return dataclasses.replace(p, graphs=dataclasses.replace(p.graphs, pad_tiers=()))


@pytest.mark.parametrize("tokens,expected", [
    (1, 1), (2, 2), (3, 4), (4, 4), (5, 8), (9, 16), (10, 16), (17, 24), (250, 256),
    (256, 256), (257, 257), (1000, 1000)])
def test_vllm_v0_pads_a_decode_batch_as_get_graph_batch_size_does(tokens, expected):
    graphs = load_software("vllm-v0").graphs
    largest = graphs.largest_captured()  # the default max_num_seqs 256
    assert largest == 256
    assert graphs.padded_tokens(tokens, False, largest) == expected
    assert graphs.padded_tokens(tokens, True, largest) == tokens  # V0 prefills eagerly


@pytest.mark.parametrize("tokens,expected", [
    (3, 4), (10, 16), (248, 248), (249, 256), (257, 272), (300, 304), (500, 512), (512, 512),
    (513, 513)])
def test_vllm_v1_pads_any_step_to_its_capture_sizes(tokens, expected):
    graphs = load_software("vllm").graphs
    assert graphs.padded_tokens(tokens, False) == expected
    assert graphs.padded_tokens(tokens, True) == expected  # piecewise graphs: mixed steps too


@pytest.mark.parametrize("tokens,expected", [
    (3, 4), (5, 8), (9, 12), (12, 12), (13, 16), (17, 24), (250, 256), (257, 272), (500, 512),
    (513, 544), (600, 608)])
def test_sglang_pads_a_decode_batch_to_its_capture_sizes(tokens, expected):
    # server_args.py `_generate_cuda_graph_batch_sizes` (0.5.9): [1, 2, 4, 8, 12] +
    # range(16, 257, 8) + range(272, 512, 16) + range(512, max + 1, 32)
    graphs = load_software("sglang").graphs
    assert graphs.padded_tokens(tokens, False, 1024) == expected
    assert graphs.padded_tokens(tokens, True, 1024) == tokens  # prefill (extend) runs eagerly


@pytest.mark.parametrize("system,tp,largest", [
    ("h100-80gb-x8", 1, 256), ("h100-80gb-x8", 2, 256), ("h100-80gb-x8", 4, 512),
    ("a100-80gb-x8", 8, 512), ("a100-40gb-x8", 1, 32), ("a100-40gb-x8", 4, 160),
    ("h200-x8", 1, 256), ("b200-x8", 1, 512)])
def test_sglang_captures_up_to_its_memory_and_tp_default(system, tp, largest):
    # `_handle_gpu_memory_settings`: below 60 GiB 32 / 160, below 160 GiB 256 / 512 (TP < 4 /
    # TP >= 4), above 512
    assert Simulator(system, "sglang").largest_captured(tp) == largest


def test_sglang_captures_its_request_pool_size_itself():
    # `get_batch_sizes_to_capture`: sizes above the pool are dropped and the pool size added
    graphs = load_software("sglang").graphs
    largest = graphs.largest_captured(100)
    assert largest == 100
    assert [graphs.padded_tokens(t, False, largest) for t in (95, 96, 97, 100, 101)] == \
        [96, 96, 100, 100, 101]


@pytest.mark.parametrize("max_num_seqs,largest", [
    (None, 256), (16, 16), (100, 104), (256, 256), (300, 304), (10000, 8192)])
def test_vllm_v0_captures_up_to_max_num_seqs_rounded_up(max_num_seqs, largest):
    # 0.6.0 worker/model_runner.py `_get_max_graph_batch_size(max_num_seqs)`
    assert load_software("vllm-v0").graphs.largest_captured(max_num_seqs, 1024) == largest


@pytest.mark.parametrize("name", ["trtllm", "eager", "vllm-eager"])
def test_engines_whose_sizes_are_not_read_do_not_pad(name):
    graphs = load_software(name).graphs
    assert [graphs.padded_tokens(t, p) for t in (3, 10, 100) for p in (True, False)] == \
        [3, 3, 10, 10, 100, 100]


def test_a_malformed_padding_rule_is_an_error():
    def load(graphs):
        return profile_from_dict({"name": "x", "kernels": "vllm", "graphs": graphs}, "f")
    with pytest.raises(SoftwareError, match="graphs.pad_tiers needs pad_max"):
        load({"pad_tiers": [[8, 8]]})
    with pytest.raises(SoftwareError, match="pad_max .* from 4 to 65536, got 1000000000"):
        load({"pad_tiers": [[8, 8]], "pad_max": 10**9})
    with pytest.raises(SoftwareError, match=r"graphs.pad_tiers: expected a list of \[first "
                                            r"size, step\] pairs"):
        load({"pad_tiers": [8, 8], "pad_max": 512})
    with pytest.raises(SoftwareError, match=r"must rise from above 4 .*got \[256, 8\]"):
        load({"pad_tiers": [[256, 16], [8, 8]], "pad_max": 512})
    with pytest.raises(SoftwareError, match="pad_limit 'sglang' needs pad_tiers"):
        load({"pad_limit": "sglang"})
    with pytest.raises(SoftwareError, match="pad_limit: 'v2' is not one of '', vllm-v0"):
        load({"pad_tiers": [[8, 8]], "pad_max": 512, "pad_limit": "v2"})


def test_a_padded_decode_batch_runs_its_gemms_at_the_captured_size_and_attention_at_its_own():
    sim = Simulator("h100-80gb-x8", "vllm-v0")
    ten, sixteen = (sim.run(MODEL, 1, b, 128, 4).decode.categories for b in (10, 16))
    assert ten["GEMM"] == pytest.approx(sixteen["GEMM"], rel=1e-12)
    assert ten["attention"] < sixteen["attention"]
    plain = Simulator("h100-80gb-x8", unpadded("vllm-v0")).run(MODEL, 1, 10, 128, 4)
    assert plain.decode.categories["GEMM"] < ten["GEMM"]
    # the attention kernel and the LM head see the 10 sequences (RoPE and the KV write, in
    # the attention category too, are token operators of the graph: padded)
    padded_ops = sim.run(MODEL, 1, 10, 128, 4).decode.ops
    for op in ("attention", "lm_head"):
        assert plain.decode.ops[op]["time_s"] == pytest.approx(padded_ops[op]["time_s"],
                                                               rel=1e-12), op
    assert plain.decode.ops["kv_cache_write"]["time_s"] < \
        padded_ops["kv_cache_write"]["time_s"]


def test_a_batch_at_a_captured_size_is_not_changed():
    padded = Simulator("h100-80gb-x8", "vllm").run(MODEL, 2, 8, 128, 16)
    plain = Simulator("h100-80gb-x8", unpadded("vllm")).run(MODEL, 2, 8, 128, 16)
    assert (padded.ttft_s, padded.tpot_s) == (plain.ttft_s, plain.tpot_s)


def test_vllm_v1_pads_a_short_prompt_step_and_v0_does_not():
    for name, changes in (("vllm", True), ("vllm-v0", False)):
        padded = Simulator("h100-80gb-x8", name).run(MODEL, 1, 1, 100, 2)
        plain = Simulator("h100-80gb-x8", unpadded(name)).run(MODEL, 1, 1, 100, 2)
        assert (padded.prefill.time_s > plain.prefill.time_s) is changes, name


def test_the_oracle_pads_as_the_simulator_does():
    sim = Simulator("h100-80gb-x8", "vllm-v0")
    timer = StepTimer(sim, MODEL, 1, max_tokens=1024, max_sequences=64, max_context=2048)
    a = timer.decode_attention_s(10, 500)
    # the layers of a 10-sequence decode step run at 16 tokens: the same step as 16 tokens
    assert timer.step_s(10, 10, 10, a, False) == timer.step_s(16, 10, 10, a, False)
    assert timer.step_s(10, 10, 10, a, False) > \
        StepTimer(Simulator("h100-80gb-x8", unpadded("vllm-v0")), MODEL, 1, max_tokens=1024,
                  max_sequences=64, max_context=2048).step_s(10, 10, 10, a, False)
    # a decode window times each step as a single step does
    assert timer.decode_steps_list(10, 500.0, 3)[0] == pytest.approx(
        timer.step_s(10, 10, 10, a, False), rel=1e-12)
    # and both agree with the simulator's own padded decode step
    direct = sim.run(MODEL, 1, 10, 499, 2, check_memory=False).decode.step_times_s[0]
    assert timer.step_s(10, 10, 10, a, False) == pytest.approx(direct, rel=0.01)


def test_the_run_report_says_which_graph_a_padded_step_replays():
    from krakenlm.simulator.report import run_report

    def line(software, batch, prompt):
        table = run_report("h100-80gb-x8", "llama3-8b", 1, batch, prompt, 20,
                           software=software).to_table()
        return next(t for t in table if isinstance(t, str) and t.startswith("software"))

    assert line("vllm", 3, 100) == ("software vllm; attention fused; CUDA graphs: prefill's 300 "
                                    "tokens run the graph captured for 304, decode's batch of 3 "
                                    "runs the graph captured for 4")
    assert line("vllm-v0", 10, 100).endswith("decode's batch of 10 runs the graph captured for 16")
    assert line("vllm", 8, 64) == "software vllm; attention fused"  # 512 tokens, batch 8
    assert line("vllm", 8, 128) == ("software vllm; attention fused; CUDA graphs: prefill's "
                                    "1024 tokens run without one (the largest is 512)")


@pytest.mark.parametrize("max_num_seqs,budget,largest", [
    (256, 2048, 512), (1024, 8192, 512), (16, 1024, 32), (50, 8192, 96), (256, 300, 288),
    (3, 8192, 4), (1, 100, 2)])
def test_vllm_v1_captures_up_to_twice_max_num_seqs_and_the_token_budget(max_num_seqs, budget,
                                                                         largest):
    # vllm/config/vllm.py `_set_cudagraph_sizes` (0.19): min(2 x max_num_seqs, 512, budget),
    # then the largest of 1, 2, 4, multiples of 8 below 256 and of 16 from 256 under it
    graphs = load_software("vllm").graphs
    assert graphs.largest_captured(max_num_seqs, budget) == largest
    assert graphs.padded_tokens(largest + 1, True, largest) == largest + 1  # no graph: unpadded
    assert graphs.padded_tokens(largest, True, largest) == largest


def test_the_oracle_pads_only_up_to_the_graphs_its_engine_captures():
    sim = Simulator("h100-80gb-x8", "vllm")
    small = StepTimer(sim, MODEL, 1, max_tokens=1024, max_sequences=16, max_context=2048)
    large = StepTimer(sim, MODEL, 1, max_tokens=1024, max_sequences=256, max_context=2048)
    plain = StepTimer(Simulator("h100-80gb-x8", unpadded("vllm")), MODEL, 1, max_tokens=1024,
                      max_sequences=16, max_context=2048)
    p = load_software("vllm")
    ungraphed = StepTimer(
        Simulator("h100-80gb-x8", dataclasses.replace(p, graphs=dataclasses.replace(
            p.graphs, prefill=False, decode=False, pad_tiers=()))),
        MODEL, 1, max_tokens=1024, max_sequences=16, max_context=2048)
    a = small.prefill_attention_s(100, 0)
    # a 100-token prompt step: above 32 (max_num_seqs 16 captures up to 32) it runs without a
    # graph (unpadded, its kernels issued from the host at the profile's rate, no graph
    # launch), under the default knobs (up to 512) at the graph of 104
    assert small.step_s(100, 1, 1, a, True) == ungraphed.step_s(100, 1, 1, a, True)
    assert small.step_s(100, 1, 1, a, True) != plain.step_s(100, 1, 1, a, True)
    assert small.step_s(32, 1, 1, a, True) == plain.step_s(32, 1, 1, a, True)  # graphed
    assert large.step_s(100, 1, 1, a, True) == large.step_s(104, 1, 1, a, True)
    assert large.step_s(100, 1, 1, a, True) > plain.step_s(100, 1, 1, a, True)
    # V0 captures up to max_num_seqs rounded up: 16 here, so a 10-sequence batch still pads
    v0 = StepTimer(Simulator("h100-80gb-x8", "vllm-v0"), MODEL, 1, max_tokens=1024,
                   max_sequences=16, max_context=2048)
    d = v0.decode_attention_s(10, 500)
    assert v0.step_s(10, 10, 10, d, False) == v0.step_s(16, 10, 10, d, False)


@pytest.mark.parametrize("name,knob,seqs,budget,largest", [
    # vLLM V1 --max-cudagraph-capture-size replaces min(2 x max_num_seqs, 512), still capped
    # by the token budget and rounded down to a captured size (0.19 `_set_cudagraph_sizes`)
    ("vllm", 64, 16, 8192, 64), ("vllm", 1000, 256, 8192, 992), ("vllm", 1000, 256, 512, 512),
    ("vllm", 100, 256, 8192, 96),
    # SGLang --cuda-graph-max-bs replaces the memory rule; sizes above it dropped, the request
    # pool still bounds it and is captured itself (0.5.9 `_generate_cuda_graph_batch_sizes`)
    ("sglang", 100, 2048, 8192, 96), ("sglang", 1024, 4096, 8192, 1024),
    ("sglang", 1024, 700, 8192, 700)])
def test_an_engines_capture_size_knob_replaces_its_default(name, knob, seqs, budget, largest):
    sim = Simulator("h100-80gb-x8", name)
    assert sim.largest_captured(1, seqs, budget, knob) == largest


def test_no_cuda_graphs_issue_every_kernel_from_python_and_pad_nothing():
    from krakenlm.serving.replay import cuda_graph_session
    from krakenlm.serving.vllm_v1 import V1Options

    eager_s = load_software("eager").host.per_kernel_s
    for name in ("vllm", "vllm-v0", "sglang", "trtllm"):
        sim = Simulator("h100-80gb-x8", name)
        off = cuda_graph_session(sim, V1Options(cuda_graph_max=0))
        graphs = off.profile.graphs
        assert (graphs.prefill, graphs.decode, graphs.pads) == (False, False, False)
        issued = off.profile.host_for("h100-80gb-x8").per_kernel_s
        if name == "trtllm":  # its C++ runtime issues at its own (fitted) rate
            assert issued == sim.profile.host_for("h100-80gb-x8").per_kernel_s
        else:
            assert issued == eager_s  # PyTorch's eager dispatch (gpt-fast's measured rate)
        assert cuda_graph_session(sim, V1Options()) is sim
    # a small model's decode step is launch-bound without its graphs
    sim = Simulator("h100-80gb-x8", "vllm")
    model = get_preset("gpt3-1.3b")
    on = StepTimer(sim, model, 1, max_tokens=1024, max_sequences=64, max_context=2048)
    off = StepTimer(cuda_graph_session(sim, V1Options(cuda_graph_max=0)),
                    model, 1, max_tokens=1024, max_sequences=64, max_context=2048)
    a = on.decode_attention_s(8, 500)
    assert off.step_s(8, 8, 8, a, False) > 1.5 * on.step_s(8, 8, 8, a, False)


@pytest.mark.parametrize("name,knob,message", [
    ("vllm", -1, "--cuda-graph-max must be from 0 (no CUDA graphs) to 65536, got -1"),
    ("sglang", 100000, "--cuda-graph-max must be from 0 (no CUDA graphs) to 65536"),
    ("vllm-v0", 64, "--cuda-graph-max 64: the vllm-v0 profile's engine has no knob"),
    ("trtllm", 8, "--cuda-graph-max 8: the trtllm profile's engine has no knob")])
def test_a_capture_size_knob_the_engine_lacks_is_an_error(name, knob, message):
    from krakenlm.serving.replay import ServeError, cuda_graph_session
    from krakenlm.serving.vllm_v1 import V1Options

    with pytest.raises(ServeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        cuda_graph_session(Simulator("h100-80gb-x8", name), V1Options(cuda_graph_max=knob))


def test_the_capture_size_knob_reaches_the_replay_and_a_cluster(capsys):
    from krakenlm.cli import main

    base = ["sim", "serve", "--model", "gpt3-1.3b", "--trace", "synthetic", "--rate", "20",
            "--requests", "60", "--lengths", "fixed:200,40", "--seed", "1", "--json"]
    tpot = {}
    for replicas in (["--replicas", "1"], ["--replicas", "h100-80gb-x8:tp1:2"]):
        for knob in ([], ["--cuda-graph-max", "0"]):
            with pytest.raises(SystemExit) as done:
                main(base + ["--system", "h100-80gb-x8"] * (replicas[1] == "1") + replicas
                     + knob)
            out = capsys.readouterr().out
            assert done.value.code in (0, None), out
            tpot[(replicas[1], bool(knob))] = json.loads(out)["summary"]["tpot_s"]["mean"]
    for pool in ("1", "h100-80gb-x8:tp1:2"):
        assert tpot[(pool, True)] > tpot[(pool, False)]


def _ungraphed(name: str):
    p = load_software(name)
    return dataclasses.replace(p, graphs=dataclasses.replace(p.graphs, prefill=False,
                                                             decode=False, pad_tiers=()))


def test_a_batch_above_the_largest_graph_runs_without_one_in_the_simulator():
    # vLLM V0 captures decode graphs up to 256 at its default max_num_seqs: a static batch of
    # 300 decodes without a graph, eagerly (`eager_above_largest`), as the graphs-off profile
    # times it; at V0's own rate for kernels outside a graph it would be faster
    sim = Simulator("h100-80gb-x8", "vllm-v0")
    above, at = sim.run(MODEL, 1, 300, 128, 4), sim.run(MODEL, 1, 256, 128, 4)
    assert (above.decode_captured, at.decode_captured) == (False, True)
    off = Simulator("h100-80gb-x8", load_software("vllm-v0").without_cuda_graphs())
    assert above.tpot_s == pytest.approx(off.run(MODEL, 1, 300, 128, 4).tpot_s, rel=1e-12)
    own_rate = Simulator("h100-80gb-x8", _ungraphed("vllm-v0")).run(MODEL, 1, 300, 128, 4)
    assert own_rate.tpot_s < above.tpot_s
    assert above.retimed(sim.profile.host) == pytest.approx((above.ttft_s, above.tpot_s),
                                                            rel=1e-9)
    # vLLM V1's prompt step of more tokens than its largest graph (512) runs without one
    v1 = Simulator("h100-80gb-x8", "vllm")
    assert v1.run(MODEL, 1, 1, 600, 2).prefill_captured is False
    assert v1.run(MODEL, 1, 1, 500, 2).prefill_captured is True


def test_the_oracle_times_a_decode_window_above_the_largest_graph_without_one():
    sim = Simulator("h100-80gb-x8", "vllm")
    small = StepTimer(sim, MODEL, 1, max_tokens=1024, max_sequences=16, max_context=2048)
    off = StepTimer(Simulator("h100-80gb-x8", _ungraphed("vllm")), MODEL, 1, max_tokens=1024,
                    max_sequences=16, max_context=2048)
    # 40 decodes: above the 32 tokens max_num_seqs 16 captures, in a window and in one step
    assert small.decode_steps_list(40, 500.0, 3) == off.decode_steps_list(40, 500.0, 3)
    a = small.decode_attention_s(40, 500)
    assert small.step_s(40, 40, 40, a, False) == off.step_s(40, 40, 40, a, False)
    assert small.step_s(24, 24, 24, a, False) != off.step_s(24, 24, 24, a, False)  # graphed


def test_sim_runs_capture_size_knob_bounds_the_static_batchs_graph():
    # vLLM V1 --max-cudagraph-capture-size 64: a decode batch of 128 runs without a graph, as
    # the graphs-off profile at V1's own issue rate times it; 64 still replays its graph
    from krakenlm.simulator.run import simulate

    sim = Simulator("h100-80gb-x8", "vllm")
    above = sim.run(MODEL, 1, 128, 128, 4, capture_max=64)
    assert (above.graph_largest, above.decode_captured) == (64, False)
    assert sim.run(MODEL, 1, 64, 128, 4, capture_max=64).decode_captured is True
    assert sim.run(MODEL, 1, 128, 128, 4).decode_captured is True  # the default 512
    off = Simulator("h100-80gb-x8", _ungraphed("vllm")).run(MODEL, 1, 128, 128, 4)
    assert above.tpot_s == pytest.approx(off.tpot_s, rel=1e-12)
    assert simulate(MODEL, "h100-80gb-x8", 1, 128, 128, 4, software="vllm",
                    cuda_graph_max=64).tpot_s == above.tpot_s
    # 0: no graphs, every kernel at PyTorch's eager rate (the same session `sim serve` builds)
    eager = simulate(MODEL, "h100-80gb-x8", 1, 8, 128, 4, software="vllm", cuda_graph_max=0)
    none = Simulator("h100-80gb-x8", load_software("vllm").without_cuda_graphs())
    assert eager.tpot_s == none.run(MODEL, 1, 8, 128, 4).tpot_s
    assert eager.tpot_s > sim.run(MODEL, 1, 8, 128, 4).tpot_s
    with pytest.raises(SoftwareError, match="the trtllm profile's engine has no knob"):
        simulate(MODEL, "h100-80gb-x8", 1, 8, 128, 4, software="trtllm", cuda_graph_max=8)
    with pytest.raises(Exception, match="is another profile"):
        sim.run(MODEL, 1, 8, 128, 4, capture_max=0)


def test_sim_run_says_when_no_phase_replays_a_graph(capsys):
    from krakenlm.cli import main

    with pytest.raises(SystemExit) as done:
        main(["sim", "run", "--system", "h100-80gb-x8", "--model", "gpt3-1.3b", "--prompt", "64",
              "--gen", "8", "--software", "sglang", "--cuda-graph-max", "0"])
    assert done.value.code == 0
    assert "CUDA graphs: none, every kernel issued from the host" in capsys.readouterr().out


def test_sim_runs_json_says_which_graphs_the_steps_replayed():
    sim = Simulator("h100-80gb-x8", "vllm")
    graphs = sim.run(MODEL, 1, 100, 3, 8).to_json()["cuda_graphs"]
    # 300 prompt tokens replay V1's graph for 304, a decode batch of 100 the one for 104
    assert graphs == {"largest_captured": 512, "prefill_tokens": 300, "prefill": True,
                      "decode": True, "prefill_runs_at_tokens": 304, "decode_runs_at_batch": 104}
    above = sim.run(MODEL, 1, 100, 3, 8, capture_max=64).to_json()["cuda_graphs"]
    assert above == {"largest_captured": 64, "prefill_tokens": 300, "prefill": False,
                     "decode": False, "prefill_runs_at_tokens": 300, "decode_runs_at_batch": 100}


def test_sglang_and_vllm_v0_issue_a_step_above_their_largest_graph_eagerly():
    """Above the largest captured graph SGLang and vLLM V0 run the model in PyTorch's eager
    dispatch (`graphs.eager_above_largest`): the oracle times such a step, alone or in a
    decode window, as the graphs-off profile (every kernel at the eager rate) does, and a
    captured one as before; vLLM V1's compiled pieces keep its own rate."""
    for name in ("vllm-v0", "sglang"):
        profile = load_software(name)
        assert profile.graphs.eager_above_largest
        assert profile.issuing_host(profile.host, True).per_kernel_s == \
            load_software("eager").host.per_kernel_s
        sim = Simulator("h100-80gb-x8", name)
        small = StepTimer(sim, MODEL, 1, max_tokens=1024, max_sequences=16, max_context=2048)
        off = StepTimer(Simulator("h100-80gb-x8", profile.without_cuda_graphs()), MODEL, 1,
                        max_tokens=1024, max_sequences=16, max_context=2048)
        a = small.decode_attention_s(40, 500)
        assert small.step_s(40, 40, 40, a, False) == off.step_s(40, 40, 40, a, False)
        assert small.decode_steps_list(40, 500.0, 3) == off.decode_steps_list(40, 500.0, 3)
        assert small.step_s(16, 16, 16, a, False) != off.step_s(16, 16, 16, a, False)
    v1 = load_software("vllm")
    assert not v1.graphs.eager_above_largest and v1.issuing_host(v1.host, True) is v1.host
