"""Software profiles and what they change: the attention path by head size, fusions, FP8 per
operator, host overheads, and the decode fast path."""

import dataclasses

import pytest

from krakenlm.cli import main
from krakenlm.hardware import load_system
from krakenlm.models import get_preset
from krakenlm.simulator.constants.gpu_kernels import DeviceCalibration
from krakenlm.simulator.constants.software import (
    Host,
    IssuedKernels,
    SoftwareError,
    load_software,
    profile_from_dict,
    software_names,
)
from krakenlm.simulator.graph import GraphOptions, model_graphs
from krakenlm.simulator.run import simulate

A100 = load_system("a100-80gb-x8")
NO_GPU_CAL = DeviceCalibration("none")  # template models only: independent of shipped files


def test_every_shipped_profile_loads_with_sources():
    names = software_names()
    assert {"trtllm", "vllm", "vllm-v0", "sglang", "eager", "lmdeploy"} <= set(names)
    for name in names:
        p = load_software(name)
        assert p.name == name and p.sources, name
        assert p.attention.max_head_dim >= 128


def test_malformed_profiles_are_errors_naming_the_field(tmp_path):
    with pytest.raises(SoftwareError, match=r"host: unknown field\(s\) \['per_kernel_us'\]"):
        profile_from_dict({"name": "x", "kernels": "trtllm", "host": {"per_kernel_us": 3}}, "f")
    with pytest.raises(SoftwareError, match="fp8.gemm: 'fp4' is not one of"):
        profile_from_dict({"name": "x", "kernels": "trtllm", "fp8": {"gemm": "fp4"}}, "f")
    with pytest.raises(SoftwareError, match="missing field 'kernels'"):
        profile_from_dict({"name": "x"}, "f")
    with pytest.raises(SoftwareError, match="expected a number >= 0"):
        profile_from_dict({"name": "x", "kernels": "v", "host": {"per_kernel_s": -1}}, "f")
    with pytest.raises(SoftwareError, match=r"^f: host\.multi_step_broadcast_tensors: expected a "
                       "whole number >= 0, got 2.5"):
        profile_from_dict({"name": "x", "kernels": "v",
                           "host": {"multi_step_broadcast_tensors": 2.5}}, "f")
    assert profile_from_dict({"name": "x", "kernels": "v", "host": {
        "multi_step_broadcast_tensors": 10.0}}, "f").host.multi_step_broadcast_tensors == 10
    with pytest.raises(SoftwareError, match=r"^f: collectives\.custom_since: 'abc' is not an "
                       "engine version"):
        profile_from_dict({"name": "x", "kernels": "v", "collectives": {"custom_since": "abc"}},
                          "f")
    for good in ("0.8", "1.0.0rc1", "0.5.6.post2", ""):
        profile_from_dict({"name": "x", "kernels": "v", "collectives": {"custom_since": good}},
                          "f")
    with pytest.raises(SoftwareError, match=r"^f: host\.per_sequence_until: 'soon' is not an "
                       "engine version"):
        profile_from_dict({"name": "x", "kernels": "v", "host": {"per_sequence_until": "soon"}},
                          "f")
    with pytest.raises(SoftwareError, match="unknown software 'tgi'"):
        load_software("tgi")
    bad = tmp_path / "p.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(SoftwareError, match="is not valid YAML"):
        load_software(str(bad))


def test_fp8_applies_to_the_operators_the_engine_quantises():
    p = load_software("trtllm")
    assert p.precision("gemm", "fp8") == "fp8"
    for op in ("attention", "kv_cache", "lm_head", "all_reduce", "elementwise"):
        assert p.precision(op, "fp8") == "bf16", op
    assert p.precision("gemm", "fp16") == "fp16"
    # memory: FP8 shrinks the layers' matrices only, not the embedding, head or KV cache
    cfg = get_preset("llama2-70b")
    f16 = simulate(cfg, A100, 8, 4, 1024, 2, dtype="fp16", gpu_calibration=NO_GPU_CAL)
    h100 = load_system("h100-80gb-x8")
    f8 = simulate(cfg, h100, 8, 4, 1024, 2, dtype="fp8", gpu_calibration=NO_GPU_CAL)
    assert f8.memory.kv_cache_bytes == f16.memory.kv_cache_bytes
    embedding_and_head = (cfg.embedding_params() + cfg.vocab_size * cfg.d_model / 8 + cfg.d_model) * 2
    assert f8.memory.weights_bytes == pytest.approx(f16.memory.weights_bytes / 2
                                                    + embedding_and_head / 2, rel=0.01)


def test_custom_all_reduce_up_to_the_profiles_limit():
    v0 = load_software("vllm-v0")  # V0 engines: the custom kernel up to 8 MiB, NCCL above
    assert v0.uses_custom_all_reduce(8 * 2**20) and not v0.uses_custom_all_reduce(8 * 2**20 + 1)
    # today's vLLM and SGLang: no profile cap; the measured version's routes decide per size
    assert load_software("vllm").uses_custom_all_reduce(1e12)
    assert load_software("sglang").uses_custom_all_reduce(1e12)
    assert load_software("trtllm").uses_custom_all_reduce(1e12)
    assert not load_software("eager").uses_custom_all_reduce(1)


def test_trtllm_before_0_8_reduces_with_nccl():
    """Engine era: TensorRT-LLM 0.5-0.7 built the NCCL plugin unless --use_custom_all_reduce was
    passed; a row of such a version is simulated with NCCL, a 0.9 row with the custom kernel."""
    from krakenlm.simulator.measurements.harness import engine_era

    trt = load_software("trtllm")
    assert trt.collectives.custom_since == "0.8"
    old = engine_era(trt, "0.5")
    assert old.collectives.all_reduce == "nccl" and not old.uses_custom_all_reduce(16384)
    assert old.host == trt.host and old.name == "trtllm"  # only the collective changes
    assert engine_era(trt, "0.9.0") is trt and engine_era(trt, "") is trt
    assert engine_era(load_software("eager"), "0.1") is load_software("eager")
    cfg = get_preset("llama2-7b")
    nccl = simulate(cfg, A100, 4, 1, 128, 1, software=old)
    custom = simulate(cfg, A100, 4, 1, 128, 1, software=trt)
    # a 1 MiB prefill all-reduce on 4 A100s: NCCL's ring is slower than the one-shot kernel

    def all_reduce_s(r):
        return sum(op["time_s"] for name, op in r.prefill.ops.items() if "allreduce" in name)

    assert all_reduce_s(nccl) > all_reduce_s(custom) > 0


def test_fastertransformer_rows_reduce_with_nccl():
    """FasterTransformer predates the `trtllm` profile's versions and its custom all-reduce was
    opt-in (enable_custom_all_reduce=0): its rows, which carry no version, are simulated with
    NCCL; a version-less TensorRT-LLM row keeps the profile's custom kernel."""
    from krakenlm.simulator.measurements.harness import engine_era, row_results
    from krakenlm.simulator.measurements.models import load_rows
    from krakenlm.simulator.run import resolve_model

    trt = load_software("trtllm")
    ft = engine_era(trt, "", "FasterTransformer")
    assert ft.collectives.all_reduce == "nccl" and ft.host == trt.host
    assert engine_era(trt, "", "trtllm") is trt
    eager = engine_era(load_software("eager"), "", "fastertransformer")
    assert eager.collectives == load_software("eager").collectives  # NCCL already
    row = next(r for r in load_rows() if r.source == "fastertransformer_gpt" and r.tp == 8)
    assert row.version == ""
    main, _ = row_results(row, resolve_model(row.model)[1], trt)
    assert main.profile.collectives.all_reduce == "nccl"


def test_fastertransformer_context_attention_is_unfused_and_its_decode_fused():
    """FasterTransformer's GPT context attention is a batched QK^T GEMM into a score buffer, a
    masked softmax and a batched AV GEMM (GptContextAttentionLayer.cc); its decode runs the fused
    masked MHA kernel. Its era's prefill is the unfused path exactly (the TTFT of a one-token
    generation equals `attention="unfused"`'s), its decode step the fused kernel's, and no other
    engine changes."""
    from krakenlm.simulator.measurements.harness import engine_era

    trt = load_software("trtllm")
    assert trt.attention.context_fused  # the profile's own default: a fused context kernel
    ft = engine_era(trt, "", "fastertransformer")
    assert not ft.attention.context_fused
    assert engine_era(trt, "0.5", "trtllm").attention.context_fused
    assert engine_era(load_software("vllm-v0"), "0.5.0", "vllm").attention.context_fused
    fused_era = dataclasses.replace(ft, attention=dataclasses.replace(ft.attention,
                                                                      context_fused=True))
    cfg = get_preset("gpt2-350m")
    run = {"check_memory": False, "check_context": False}
    era = simulate(cfg, A100, 1, 8, 512, 1, software=ft, **run)
    unfused = simulate(cfg, A100, 1, 8, 512, 1, software=fused_era, attention="unfused", **run)
    flash = simulate(cfg, A100, 1, 8, 512, 1, software=fused_era, **run)
    assert era.ttft_s == pytest.approx(unfused.ttft_s, rel=1e-12)
    assert era.ttft_s > flash.ttft_s
    assert {"attn_qk", "attn_softmax", "attn_av"} <= set(era.prefill.ops)
    assert "attention" not in era.prefill.ops
    # decode keeps the fused kernel: the same TPOT as the flash-context era, attention op named
    era_d = simulate(cfg, A100, 1, 8, 512, 9, software=ft, **run)
    flash_d = simulate(cfg, A100, 1, 8, 512, 9, software=fused_era, **run)
    assert era_d.tpot_s == pytest.approx(flash_d.tpot_s, rel=1e-12)
    assert "attention" in era_d.decode.ops and "attn_qk" not in era_d.decode.ops
    assert era.attention_path.startswith("unfused in prefill")


def test_a_profile_can_declare_an_unfused_context_phase():
    """`attention.context_fused` is a profile field: true or false, anything else an error
    naming it."""
    data = {"name": "x", "kernels": "trtllm", "attention": {"context_fused": False}}
    assert not profile_from_dict(data, "f").attention.context_fused
    assert profile_from_dict({"name": "x", "kernels": "trtllm"}, "f").attention.context_fused
    with pytest.raises(SoftwareError, match="attention.context_fused: expected true or false"):
        profile_from_dict({"name": "x", "kernels": "trtllm",
                           "attention": {"context_fused": 0}}, "f")


def test_vllm_v0_output_processing_is_per_sequence_until_0_6():
    """vLLM V0 before 0.6.0 processed each sequence's output (detokenisation, stop checks) while
    the GPU waited: 0.10 ms per sequence per step (vLLM #6913). From 0.6.0 the asynchronous
    output processor (#7049) runs it beside the next step: a 0.7.3 row carries only what stays
    between the steps, 0.038 ms per sequence (scheduling, inputs, sampler: Vidur's split)."""
    from krakenlm.simulator.measurements.harness import row_host, simulate_row_times
    from krakenlm.simulator.measurements.models import ModelRow
    from krakenlm.simulator.run import step_overhead

    v0 = load_software("vllm-v0")
    assert v0.host.per_sequence_s == pytest.approx(1e-4)
    assert step_overhead(v0.host, v0, "decode", 64, 1) == pytest.approx(1.5e-3 + 64 * 1e-4 + 1e-5)

    def row(version):
        return ModelRow("s", "llama2-7b", "h100-80gb-x8", 1, "vllm", version, "fp16", 32, 128, 16,
                        "e2e", 1.0, "held_out", "")

    for version in ("0.5.4-0.6.x", "0.2.6 + PR #2192", ""):
        assert row_host(row(version), v0.host) is v0.host, version
    for version in ("0.6.0", "0.7.3 (ROCm fork)"):
        assert row_host(row(version), v0.host) == dataclasses.replace(v0.host,
                                                                      per_sequence_s=3.8e-5)
    assert "cpu_overheads.csv" in v0.sources["VSA"]
    cfg = get_preset("llama2-7b")
    ttft_old, tpot_old = simulate_row_times(row("0.5.4"), cfg, v0)
    ttft_new, tpot_new = simulate_row_times(row("0.7.3"), cfg, v0)
    assert tpot_old - tpot_new == pytest.approx(32 * (1e-4 - 3.8e-5), rel=1e-6)
    assert ttft_old - ttft_new == pytest.approx(32 * (1e-4 - 3.8e-5), rel=1e-6)


def test_vllm_eager_host_time_per_step_is_its_sourced_formula():
    """The 2023 engine's host work per step: 4 ms (vLLM #6913's trace) plus 0.22 ms per sequence
    (output processing, #6913, and the per-request sampling loop, #249), not Vidur's values."""
    from krakenlm.simulator.run import step_overhead

    p = load_software("vllm-eager")
    assert step_overhead(p.host, p, "decode", 32, 1) == pytest.approx(4e-3 + 32 * 2.2e-4)
    assert step_overhead(p.host, p, "prefill", 1, 1) == pytest.approx(4e-3 + 2.2e-4)
    cited = p.sources["VS"]
    assert "issues/6913" in cited and "issues/249" in cited
    assert "Sarathi" in cited  # Vidur is named as what the value is not


def _names(cfg, options, tp=4):
    return [o.name for g in model_graphs(cfg, tp, 1, 64, 64, "prefill", 2, options=options)
            for o in g.ops]


def test_heads_wider_than_the_kernel_run_unfused_and_say_so():
    wide = get_preset("kraken-gpt3-13b-4way-hc")  # heads of 314
    narrow = get_preset("kraken-gpt3-13b-4way")    # heads of 64
    opts = GraphOptions(max_head_dim=256, attention_kernel="FlashAttention-2")
    assert "attn_qk" in _names(wide, opts) and "attention" not in _names(wide, opts)
    assert "attention" in _names(narrow, opts)
    r = simulate(wide, A100, 4, 1, 512, 2, software="vllm", gpu_calibration=NO_GPU_CAL)
    assert r.attention_path == ("unfused (head dim 314 > 256, the largest FlashAttention-2/3 "
                                "(vllm_flash_attn) supports)")
    assert "attn_softmax" in r.prefill.ops and "attn_softmax" in r.decode.ops
    assert simulate(narrow, A100, 4, 1, 512, 2, software="vllm",
                    gpu_calibration=NO_GPU_CAL).attention_path == "fused"


def test_fusions_change_the_kernel_list():
    cfg = get_preset("llama2-7b")
    plain = _names(cfg, GraphOptions(), tp=2)
    fused = _names(cfg, GraphOptions(add_norm=True, rope_in_attention=True), tp=2)
    assert {"rope", "kv_cache_write", "residual_attn", "residual_ffn"} <= set(plain)
    assert not {"rope", "kv_cache_write", "residual_attn", "residual_ffn"} & set(fused)
    assert {"add_norm_attn", "add_norm_ffn"} <= set(fused)
    # one layer graph (it repeats n_layers times): rope, KV write and two residual adds fewer
    assert len(plain) - len(fused) == 4


def test_host_bound_steps_and_per_step_overhead():
    cfg = get_preset("gpt3-1.3b")
    # the graph's operators as the kernels issued (the profile's own counts are gpt-fast's)
    base = dataclasses.replace(load_software("eager"), issued_kernels=IssuedKernels())
    fast = simulate(cfg, A100, 1, 1, 16, 4, software=dataclasses.replace(base, host=Host()),
                    gpu_calibration=NO_GPU_CAL)
    slow_host = dataclasses.replace(base, host=Host(per_kernel_s=1e-3))
    slow = simulate(cfg, A100, 1, 1, 16, 4, software=slow_host, gpu_calibration=NO_GPU_CAL)
    kernels_per_step = sum(len(g.ops) * g.count for g in
                           model_graphs(cfg, 1, 1, 1, 17, "decode", 2,
                                        options=GraphOptions(max_head_dim=256)))
    assert slow.tpot_s == pytest.approx(kernels_per_step * 1e-3)  # the host is the bottleneck
    assert slow.decode.categories["host overhead (kernel launches)"] > 0
    step = dataclasses.replace(base, host=Host(prefill_step_s=0.01, decode_step_s=0.002))
    r = simulate(cfg, A100, 1, 1, 16, 4, software=step, gpu_calibration=NO_GPU_CAL)
    assert r.ttft_s == pytest.approx(fast.ttft_s + 0.01)
    assert r.tpot_s == pytest.approx(fast.tpot_s + 0.002)
    overlapped = dataclasses.replace(step, host=dataclasses.replace(step.host, step_overlaps_gpu=True))
    r2 = simulate(cfg, A100, 1, 1, 16, 4, software=overlapped, gpu_calibration=NO_GPU_CAL)
    assert r2.tpot_s == pytest.approx(max(fast.tpot_s, 0.002))
    for res in (slow, r, r2):
        assert sum(res.prefill.categories.values()) == pytest.approx(res.ttft_s)
        assert sum(res.decode.categories.values()) == pytest.approx(res.tpot_s * 3)


def test_tp_step_cost_is_charged_on_more_than_one_rank_only():
    """`host.tp_step_s` (the driver's per-step broadcast of the inputs to the other ranks) adds
    to every prefill and decode step at TP > 1 and to none at TP 1; a profile without it times
    every TP exactly as before."""
    from krakenlm.simulator.run import step_overhead

    cfg = get_preset("gpt3-1.3b")
    base = dataclasses.replace(load_software("eager"), issued_kernels=IssuedKernels(),
                               host=Host(prefill_step_s=0.01, decode_step_s=0.002))
    with_tp = dataclasses.replace(base, host=dataclasses.replace(base.host, tp_step_s=7e-4))
    assert with_tp.host.per_step_s("decode", 1) == 0.002
    assert with_tp.host.per_step_s("decode", 2) == pytest.approx(0.0027)
    assert with_tp.host.per_step_s("prefill", 8) == pytest.approx(0.0107)
    assert step_overhead(base.host, base, "decode", 4, 8) == step_overhead(base.host, base,
                                                                            "decode", 4, 1)
    for tp in (1, 2):
        a = simulate(cfg, A100, tp, 1, 16, 4, software=base, gpu_calibration=NO_GPU_CAL)
        b = simulate(cfg, A100, tp, 1, 16, 4, software=with_tp, gpu_calibration=NO_GPU_CAL)
        extra = 7e-4 if tp > 1 else 0.0
        assert b.ttft_s == pytest.approx(a.ttft_s + extra, rel=1e-12, abs=1e-15)
        assert b.tpot_s == pytest.approx(a.tpot_s + extra, rel=1e-12, abs=1e-15)
        assert b.retimed(with_tp.host) == pytest.approx((b.ttft_s, b.tpot_s), rel=1e-12)
    # the shipped vLLM V0 profile carries it; engines with their own runtime do not
    assert load_software("vllm-v0").host.tp_step_s > 0
    for name in ("trtllm", "vllm", "sglang", "vllm-eager", "eager", "lmdeploy"):
        assert load_software(name).host.tp_step_s == 0, name


def test_tp_step_cost_reaches_the_serving_step_oracle():
    """The serving layer's mixed-batch step (serving/step_time.py) charges the same per-step
    host work as `Simulator.run` at TP > 1."""
    from krakenlm.serving.step_time import StepTimer
    from krakenlm.simulator.run import Simulator

    cfg = get_preset("llama2-7b")
    v0 = load_software("vllm-v0")
    none = dataclasses.replace(v0, host=dataclasses.replace(v0.host, tp_step_s=0.0))
    steps = []
    for profile in (v0, none):
        sim = Simulator(load_system("a100-80gb-x8"), software=profile)
        steps.append(StepTimer(sim, cfg, 2).batch_s([], [300, 300]))
    assert steps[0] - steps[1] == pytest.approx(v0.host.tp_step_s, rel=1e-9)


@pytest.mark.parametrize("preset,tp", [("gpt3-13b", 8), ("parallel-gpt3-13b", 8),
                                       ("kraken-gpt3-13b-8way", 8), ("kraken-gpt3-13b-4way-hc", 4)])
def test_fast_decode_matches_scheduling_every_step(preset, tp):
    cfg = get_preset(preset)
    fast = simulate(cfg, A100, tp, 2, 300, 200, gpu_calibration=NO_GPU_CAL, check_memory=False)
    exact = simulate(cfg, A100, tp, 2, 300, 200, gpu_calibration=NO_GPU_CAL, check_memory=False,
                     exact_decode=True)
    assert exact.decode_method.startswith("exact")
    assert fast.e2e_s == pytest.approx(exact.e2e_s, rel=1e-4)
    assert fast.decode.ops["ffn_down"]["count"] == exact.decode.ops["ffn_down"]["count"]
    if cfg.arch != "kraken":  # no collective can overlap attention: exact by construction
        assert fast.decode_method == "exact (no overlap with attention)"
        assert fast.e2e_s == pytest.approx(exact.e2e_s, rel=1e-12)


def test_run_cli_takes_software_and_names_the_attention_path(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["sim", "run", "--system", "a100-80gb-x8", "--model", "gpt3-13b", "--tp", "4",
              "--prompt", "128", "--gen", "2", "--arch", "kraken", "--kraken-rule", "head-count",
              "--software", "eager"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "software eager; attention unfused (head dim 314 > 256" in out
    with pytest.raises(SystemExit) as exc:
        main(["sim", "run", "--system", "a100-80gb-x8", "--model", "gpt3-13b", "--prompt", "8",
              "--gen", "2", "--software", "tgi"])
    assert exc.value.code == 2
    assert "unknown software 'tgi'" in capsys.readouterr().err


def test_retiming_under_other_host_constants_matches_a_new_simulation():
    cfg = get_preset("llama2-7b")
    base = load_software("vllm-v0")
    r = simulate(cfg, A100, 2, 4, 300, 40, software=base, gpu_calibration=NO_GPU_CAL)
    assert r.retimed(base.host) == pytest.approx((r.ttft_s, r.tpot_s), rel=1e-12)
    other = Host(per_kernel_s=4e-5, prefill_step_s=3e-3, decode_step_s=1e-3, graph_launch_s=2e-5,
                 step_overlaps_gpu=False)
    again = simulate(cfg, A100, 2, 4, 300, 40, software=dataclasses.replace(base, host=other),
                     gpu_calibration=NO_GPU_CAL)
    assert r.retimed(other) == pytest.approx((again.ttft_s, again.tpot_s), rel=1e-12)


def test_a_session_answers_like_single_queries():
    from krakenlm.simulator import Simulator

    sim = Simulator(A100, "vllm", gpu_calibration=NO_GPU_CAL)
    for cfg, tp, prompt in ((get_preset("llama2-7b"), 2, 300), (get_preset("gpt3-13b"), 8, 64),
                            (get_preset("llama2-7b"), 2, 300)):
        a = sim.run(cfg, tp, 2, prompt, 20, check_memory=False)
        b = simulate(cfg, A100, tp, 2, prompt, 20, software="vllm", gpu_calibration=NO_GPU_CAL,
                     check_memory=False)
        assert (a.ttft_s, a.tpot_s) == (b.ttft_s, b.tpot_s)


def test_fitted_host_constants_follow_the_system_and_its_sweep_designs():
    from krakenlm.simulator.constants.software import load_software

    trt = load_software("trtllm")
    fitted = trt.host_for("a100-80gb-x8")
    assert fitted != trt.host  # the shipped profile carries a per-system fit
    assert trt.host_for("a100-80gb-x8:54c-DDR5-16-40M") == fitted  # a design keeps its host
    assert trt.host_for("a100-40gb-x8") == fitted  # the same DGX A100 host platform
    assert trt.host_for("mi210-x4") == trt.host  # no fit: the sourced defaults


def test_last_prompt_token_in_decode_moves_one_step_into_the_ttft():
    # TurboMind (lmdeploy) prefills prompt - 1 tokens and its first decode step, over the
    # last prompt token, produces the first token
    from krakenlm.simulator.constants.software import Prefill

    cfg = get_preset("llama2-7b")
    plain = dataclasses.replace(load_software("lmdeploy"), prefill=Prefill())
    split = load_software("lmdeploy")
    assert split.prefill.last_token_in_decode and not plain.prefill.last_token_in_decode
    short = simulate(cfg, A100, 1, 2, 99, 5, software=plain, gpu_calibration=NO_GPU_CAL)
    # the same kernels: 99 prefilled tokens, then decode steps over 100, 101, ... cached tokens
    longer = simulate(cfg, A100, 1, 2, 99, 6, software=plain, gpu_calibration=NO_GPU_CAL)
    r = simulate(cfg, A100, 1, 2, 100, 5, software=split, gpu_calibration=NO_GPU_CAL)
    first_step = longer.decode.step_times_s[0]  # the decode step over 100 cached tokens
    assert r.ttft_s == pytest.approx(short.ttft_s + first_step, rel=1e-12)
    assert r.tpot_s == pytest.approx(float(longer.decode.step_times_s[1:].mean()), rel=1e-12)
    assert r.e2e_s == pytest.approx(r.ttft_s + 4 * r.tpot_s, rel=1e-12)
    assert r.retimed(split.host) == pytest.approx((r.ttft_s, r.tpot_s), rel=1e-12)
    # a one-token prompt is one decode step over that token
    one = simulate(cfg, A100, 1, 2, 1, 3, software=split, gpu_calibration=NO_GPU_CAL)
    assert one.prefill.time_s == 0.0
    assert one.ttft_s == pytest.approx(float(one.decode.step_times_s[0]), rel=1e-12)
    assert one.retimed(split.host) == pytest.approx((one.ttft_s, one.tpot_s), rel=1e-12)


def test_per_sequence_host_work_is_paid_by_every_sequence_of_every_step():
    cfg = get_preset("gpt3-1.3b")
    base = load_software("eager")
    for batch in (1, 3):
        fast = simulate(cfg, A100, 1, batch, 16, 4, software=dataclasses.replace(base, host=Host()),
                        gpu_calibration=NO_GPU_CAL)
        seq = dataclasses.replace(base, host=Host(per_sequence_s=1e-3))
        r = simulate(cfg, A100, 1, batch, 16, 4, software=seq, gpu_calibration=NO_GPU_CAL)
        assert r.ttft_s == pytest.approx(fast.ttft_s + batch * 1e-3)
        assert r.tpot_s == pytest.approx(fast.tpot_s + batch * 1e-3)
        assert r.retimed(seq.host) == pytest.approx((r.ttft_s, r.tpot_s), rel=1e-12)
        assert sum(r.decode.categories.values()) == pytest.approx(r.tpot_s * 3)


def test_row_parallel_bias_after_the_reduce_only_for_models_with_biases():
    after = GraphOptions(row_bias_after_reduce=True)
    bloom = _names(get_preset("bloom-176b"), after, tp=8)
    assert {"bias_attn", "bias_ffn"} <= set(bloom)
    # each waits for its all-reduce: the bias is added to the reduced sum
    layer = model_graphs(get_preset("bloom-176b"), 8, 1, 1, 4, "decode", 2, options=after)[1]
    deps = {op.name: op.deps for op in layer.ops}
    assert deps["bias_attn"] == ("allreduce_attn",) and deps["bias_ffn"] == ("allreduce_ffn",)
    assert len(bloom) - len(_names(get_preset("bloom-176b"), GraphOptions(), tp=8)) == 2
    assert not {"bias_attn", "bias_ffn"} & set(_names(get_preset("llama2-7b"), after, tp=2))


def test_rocm_vllm_before_its_custom_paged_attention_reads_kv_per_query_head():
    """Engine era: vLLM's ROCm build before `attention.rocm_shared_kv_since` decoded with the
    generic paged-attention kernel, one thread block per query head, each reading its KV head's
    cache. A GQA model's decode attention on an AMD GPU of such a version is timed as MHA over
    the query heads; a later version, an NVIDIA GPU or an MHA model (Llama-2-7B) is unchanged."""
    from krakenlm.simulator.measurements.harness import engine_era, row_results
    from krakenlm.simulator.measurements.models import load_rows
    from krakenlm.simulator.run import resolve_model

    v0 = load_software("vllm-v0")
    assert v0.attention.decode_shares_kv and v0.attention.rocm_shared_kv_since == "0.6.2"
    old = engine_era(v0, "0.6.1", "vllm", "amd")
    assert not old.attention.decode_shares_kv and old.host == v0.host
    assert engine_era(v0, "0.7.3", "vllm", "amd").attention == v0.attention
    assert engine_era(v0, "0.6.1", "vllm", "nvidia") is v0
    assert engine_era(v0, "0.6.1", "vllm") is v0

    def decode_attention_s(model, software):
        row = next(r for r in load_rows() if r.source == "llm_inference_bench_mi300x"
                   and r.model == model and r.tp == 8 and r.batch == 64)
        main, _ = row_results(row, resolve_model(row.model)[1], software)
        return main.decode.ops["attention"]["time_s"], main.profile

    era_s, profile = decode_attention_s("llama2-70b", v0)  # the row says vLLM 0.6.1 on MI300X
    assert not profile.attention.decode_shares_kv
    shared = dataclasses.replace(v0, attention=dataclasses.replace(
        v0.attention, rocm_shared_kv_since=""))
    shared_s, _ = decode_attention_s("llama2-70b", shared)
    # 64 query heads over 8 KV heads: at TP 8 one KV head per GPU read 8 times (batch 64 at
    # 128-2048 tokens: the reads, not the fixed latencies, dominate)
    assert era_s > 2 * shared_s
    assert decode_attention_s("llama2-7b", v0)[0] == pytest.approx(
        decode_attention_s("llama2-7b", shared)[0], rel=1e-12)


def test_rocm_shared_kv_since_must_be_an_engine_version():
    with pytest.raises(SoftwareError, match=r"^f: attention\.rocm_shared_kv_since: 'abc' is not "
                                            r"an engine version"):
        profile_from_dict({"name": "x", "kernels": "vllm",
                           "attention": {"rocm_shared_kv_since": "abc"}}, "f")
    data = {"name": "x", "kernels": "vllm", "attention": {"rocm_shared_kv_since": "0.6.2"}}
    assert profile_from_dict(data, "f").attention.rocm_shared_kv_since == "0.6.2"


def test_upstream_rocm_vllm_v0_reduces_with_rccl_and_the_fork_with_its_custom_kernel():
    """Engine era: upstream vLLM V0 disabled its custom all-reduce on AMD GPUs (is_hip(); the
    custom kernel is built for CUDA only) until `collectives.rocm_custom_since`, so a measured
    upstream build on an MI300X reduced with RCCL, timed by the MI300X's `nccl_all_reduce`
    constants (fitted on Azure's rccl-tests curve: 1 KB over 8 GPUs in 45 us). AMD's fork had
    the custom kernel: its rows, NVIDIA rows and version-less queries keep the profile's."""
    from krakenlm.hardware import load_system
    from krakenlm.simulator.constants.template import default_calibration
    from krakenlm.simulator.kernels.template.collectives import collective_time
    from krakenlm.simulator.measurements.harness import engine_era, row_results
    from krakenlm.simulator.measurements.models import load_rows
    from krakenlm.simulator.run import resolve_model

    v0 = load_software("vllm-v0")
    assert v0.collectives.all_reduce == "custom" and v0.collectives.rocm_custom_since == "0.8"
    old = engine_era(v0, "0.6.1", "vllm", "amd")
    assert old.collectives.all_reduce == "nccl" and old.host == v0.host
    assert not old.attention.decode_shares_kv  # the attention era still applies
    assert engine_era(v0, "0.7.3 (ROCm fork)", "vllm", "amd") is v0
    assert engine_era(v0, "0.6.1", "vllm", "nvidia").collectives == v0.collectives
    assert engine_era(v0, "", "vllm", "amd") is v0

    mi300x = load_system("mi300x-x8")
    rccl = default_calibration().find(mi300x.device, "nccl_all_reduce")
    assert rccl is not None and default_calibration().find(mi300x.device, "no such op") is None
    t = collective_time("all_reduce", mi300x.interconnect, 1024.0, 8, rccl.protocols)[0]
    assert t + mi300x.device.launch_overhead_s == pytest.approx(44.8e-6, rel=0.05)

    def decode_all_reduce_s(software):
        row = next(r for r in load_rows() if r.source == "llm_inference_bench_mi300x"
                   and r.model == "llama2-7b" and r.tp == 8 and r.batch == 1)
        main, _ = row_results(row, resolve_model(row.model)[1], software)
        return main.decode.categories["exposed AllReduce"], main.profile

    era_s, profile = decode_all_reduce_s(v0)  # the row says vLLM 0.6.1 on MI300X
    assert profile.collectives.all_reduce == "nccl"
    custom = dataclasses.replace(v0, collectives=dataclasses.replace(
        v0.collectives, rocm_custom_since=""))
    custom_s, custom_profile = decode_all_reduce_s(custom)
    assert custom_profile.collectives.all_reduce == "custom"
    # 64 all-reduces of 8 KB a step: ~48 us each with RCCL, ~9 us with the custom kernel
    assert era_s > 4 * custom_s


def test_rocm_custom_since_must_be_an_engine_version():
    with pytest.raises(SoftwareError, match=r"^f: collectives\.rocm_custom_since: 'abc' is not "
                                            r"an engine version"):
        profile_from_dict({"name": "x", "kernels": "vllm",
                           "collectives": {"rocm_custom_since": "abc"}}, "f")


def test_transformers_decode_copies_the_whole_kv_cache_to_append_a_token():
    """Engine era: Hugging Face transformers appends each decode step's K and V by
    torch.cat([past, new], dim=seq) per layer (measurements/harness.py CONCAT_KV_ENGINES cites the
    code): the step reads the cached kv_len - 1 tokens and the new one and writes kv_len tokens,
    2 (read + write) x batch x kv_len x 2 (K, V) x kv_heads x head_dim x 2 bytes (fp16) per
    layer. That copy is memory-bound: no faster than DRAM, grows with batch x context, and
    replaces the one-token cache write. Other frameworks on the `eager` profile (gpt-fast's
    static cache) and the prefill are unchanged."""
    from krakenlm.simulator.measurements.harness import engine_era

    eager = load_software("eager")
    assert eager.attention.kv_append == "in_place"
    hf = engine_era(eager, "4.35.2", "hf")
    assert hf.attention.kv_append == "concat" and hf.host == eager.host
    assert engine_era(eager, "", "pytorch") is eager
    # the copy alone: the measured kernel counts (the era's, tested below, and the profile's
    # gpt-fast ones) would hide it behind host time; both issue the graph's operators here
    eager = dataclasses.replace(eager, issued_kernels=IssuedKernels())
    hf = dataclasses.replace(hf, issued_kernels=eager.issued_kernels)
    assert engine_era(load_software("trtllm"), "0.9.0", "trtllm").attention.kv_append == "in_place"

    cfg = get_preset("llama2-7b")
    run = {"check_memory": False, "check_context": False}
    prompt, gen = 256, 257  # the cache doubles over the run: the copy must grow with it
    bandwidth = A100.device.memory.bandwidth_bytes_per_s

    def copy_bytes(batch):
        kv_lens = range(prompt + 1, prompt + gen)  # the decode steps' cache lengths
        return sum(2 * batch * kv * 2 * cfg.kv_heads * cfg.head_dim * 2 for kv in kv_lens) \
            * cfg.n_layers

    copies = {}
    for batch in (16, 32):
        era = simulate(cfg, A100, 1, batch, prompt, gen, software=hf, **run)
        base = simulate(cfg, A100, 1, batch, prompt, gen, software=eager, **run)
        assert "kv_cache_concat" in era.decode.ops and "kv_cache_write" not in era.decode.ops
        assert "kv_cache_write" in base.decode.ops and "kv_cache_concat" not in base.decode.ops
        copy_s = era.decode.ops["kv_cache_concat"]["time_s"]
        assert copy_bytes(batch) / bandwidth <= copy_s <= copy_bytes(batch) / (0.5 * bandwidth)
        # the step pays the copy instead of the one-token write
        extra_s = (era.tpot_s - base.tpot_s) * (gen - 1)
        assert extra_s == pytest.approx(copy_s - base.decode.ops["kv_cache_write"]["time_s"],
                                        rel=1e-6)
        assert era.ttft_s == base.ttft_s  # the prefill concatenates nothing
        copies[batch] = copy_s
    assert copies[32] == pytest.approx(2 * copies[16], rel=0.05)
    # the fast decode path times the growing copy exactly as scheduling every step does
    exact = simulate(cfg, A100, 1, 16, prompt, gen, software=hf, exact_decode=True, **run)
    fast = simulate(cfg, A100, 1, 16, prompt, gen, software=hf, **run)
    assert fast.e2e_s == pytest.approx(exact.e2e_s, rel=1e-12)


def test_transformers_decode_step_is_bound_by_the_kernels_it_issues():
    """Engine era: Hugging Face transformers' eager Llama issues every elementwise step of its
    RMSNorms and RoPE as a kernel (measurements/harness.py EAGER_OP_ENGINES, counted by
    benchmarks/hf_eager_op_count.py): 42 per layer and 44 outside the layers per decode step
    (the embedding gather 1, final RMSNorm 8, LM head 1 and 34 besides them). At batch 1 every
    graph's GPU time is below its kernels x 21.6 us, so the step is host-bound at the counted
    kernels x the profile's host.per_kernel_s (the graph's 12 operators gave 8.5 ms for
    Llama-2-7B). Every other framework keeps the profile's counts (gpt-fast's)."""
    from krakenlm.simulator.measurements.harness import EAGER_OP_ENGINES, engine_era
    from krakenlm.simulator.run import issued_kernels

    eager = load_software("eager")
    hf = engine_era(eager, "4.35.2", "hf")
    counts = EAGER_OP_ENGINES["hf"]
    assert hf.issued_kernels == counts and hf.host == eager.host
    assert eager.issued_kernels != counts  # the profile's own are gpt-fast's: the era replaces them
    assert engine_era(eager, "", "pytorch").issued_kernels == eager.issued_kernels
    cfg = get_preset("llama2-7b")
    graph_count = dataclasses.replace(eager, issued_kernels=IssuedKernels())
    for phase, q_len in (("prefill", 256), ("decode", 1)):
        for g in model_graphs(cfg, 1, 1, q_len, 257, phase, 2):
            assert issued_kernels(g, graph_count, phase) == len(g.ops)

    issued = {phase: [issued_kernels(g, hf, phase)
                      for g in model_graphs(cfg, 1, 1, q_len, 257, phase, 2)]
              for phase, q_len in (("prefill", 256), ("decode", 1))}
    # embedding, layer, head: the script's per-layer totals, and 16 / 44 outside the layers
    assert issued == {"prefill": [1, 40, 6 + 9], "decode": [1, 42, 34 + 9]}

    per_kernel = eager.host.per_kernel_s
    run = {"check_memory": False, "check_context": False}
    era = simulate(cfg, A100, 1, 1, 256, 3, software=hf, **run)
    kernels = 1 + cfg.n_layers * 42 + 43
    assert era.tpot_s == pytest.approx(kernels * per_kernel, rel=1e-9)
    old = simulate(cfg, A100, 1, 1, 256, 3, software=graph_count, **run)
    assert old.tpot_s < 0.4 * era.tpot_s
    # the host-constant fit re-times a result from its graphs: the counts travel with them
    assert era.retimed(hf.host) == pytest.approx((era.ttft_s, era.tpot_s), rel=1e-12)


def test_transformers_prefill_moves_the_bytes_of_its_unfused_elementwise_kernels():
    """Engine era: transformers 4.35's eager Llama runs RMSNorm, RoPE and SiLU x up as chains of
    plain kernels, which move 36 bytes per hidden element per norm, 20 per q and k element and 10
    per intermediate element (measurements/harness.py EAGER_OP_ENGINES, counted by
    benchmarks/hf_eager_op_count.py --elementwise-bytes) where the graph's fused kernels move 4,
    4 and 6. A batch-64 x 256-token prefill of Llama-2-7B is GPU-bound, so each such op takes
    its counted bytes at no more than the DRAM bandwidth (and at least 80 % of it), and the TTFT
    grows by exactly what those ops add; GEMMs, attention and the residual adds are unchanged,
    and the `eager` profile's own counts (gpt-fast's: 40, 48, 10) are what the era replaces."""
    from krakenlm.simulator.measurements.harness import engine_era

    eager = load_software("eager")
    assert eager.issued_kernels.elementwise_bytes_per_element() == (
        ("rmsnorm", 40.0), ("rope", 48.0), ("swiglu", 10.0))
    hf = engine_era(eager, "4.35.2", "hf")
    assert hf.issued_kernels.elementwise_bytes_per_element() == (
        ("rmsnorm", 36.0), ("rope", 20.0), ("swiglu", 10.0))
    assert load_software("vllm").issued_kernels.elementwise_bytes_per_element() == ()
    fused = dataclasses.replace(hf, issued_kernels=dataclasses.replace(
        hf.issued_kernels, rmsnorm_bytes_per_element=0.0, rope_bytes_per_element=0.0,
        swiglu_bytes_per_element=0.0))
    cfg = get_preset("llama2-7b")
    run = {"check_memory": False, "check_context": False}
    era = simulate(cfg, A100, 1, 64, 256, 1, software=hf, **run)
    old = simulate(cfg, A100, 1, 64, 256, 1, software=fused, **run)
    tokens = 64 * 256
    counted = {"norm_attn": tokens * cfg.d_model * 36, "norm_ffn": tokens * cfg.d_model * 36,
               "rope": tokens * (cfg.n_heads + cfg.kv_heads) * cfg.head_dim * 20,
               "activation": tokens * cfg.ffn_dim * 10}
    bandwidth = A100.device.memory.bandwidth_bytes_per_s
    added_s = 0.0
    for name, moved in counted.items():
        layer_s = era.prefill.ops[name]["time_s"] / cfg.n_layers
        assert moved / bandwidth <= layer_s <= moved / (0.8 * bandwidth), name
        added_s += era.prefill.ops[name]["time_s"] - old.prefill.ops[name]["time_s"]
    for name in ("qkv", "ffn_up", "ffn_down", "out_proj", "attention", "residual_attn"):
        assert era.prefill.ops[name]["time_s"] == pytest.approx(old.prefill.ops[name]["time_s"],
                                                                rel=1e-12), name
    assert added_s > 0.05 * old.ttft_s
    assert era.ttft_s - old.ttft_s == pytest.approx(added_s, rel=1e-6)


def test_eager_kernels_are_counted_part_by_part_for_every_block():
    """The eager profile's counts are per layer part (gpt-fast's: RMSNorm 8, RoPE 18, attention
    block 10 prefill / 15 decode, gated MLP 5), so a Llama layer at TP 1 issues gpt-fast's
    counted 51 / 56 and a block built of other parts what its parts issue: a GPT-2 block's
    LayerNorm and GELU are one kernel each (native_layer_norm, gelu), its MLP three GEMM /
    activation kernels, and each all-reduce of a TP > 1 layer one. Kraken's layer adds its
    one all-reduce and the add of the reduced outputs; the parallel block has one norm. The
    graphs outside the layers count their operators by the same rule, and the head adds the
    step's kernels that are no graph operator (`outside_layers_*`)."""
    from krakenlm.simulator.run import _graph_options, issued_kernels

    eager = load_software("eager")
    options = _graph_options(eager, "fused", "gpu")

    def layer(cfg, tp, phase, index=1):
        q_len = 64 if phase == "prefill" else 1
        graphs = model_graphs(cfg, tp, 1, q_len, 64, phase, 2, options=options)
        return issued_kernels(graphs[index], eager, phase)

    llama = get_preset("llama2-7b")
    assert (layer(llama, 1, "prefill"), layer(llama, 1, "decode")) == (51, 56)
    assert layer(llama, 2, "decode") == 58  # + the two all-reduces
    gpt = get_preset("gpt3-1.3b")
    assert (gpt.norm, gpt.activation, gpt.position) == ("layernorm", "gelu", "learned")
    # norm, attention block 15, residual, norm, up, GELU, down, residual
    assert layer(gpt, 1, "decode") == 1 + 15 + 1 + 1 + 3 + 1 == 22
    assert layer(gpt, 1, "prefill") == 22 - 15 + 10
    assert layer(gpt, 4, "decode") == 24
    parallel = dataclasses.replace(gpt, arch="parallel")
    assert layer(parallel, 4, "decode") == 1 + 15 + 3 + 1 + 1 + 1 == 22
    kraken = dataclasses.replace(gpt, arch="kraken", degree=4, d_model=1024, n_heads=8,
                                 ffn_dim=4096)
    assert layer(kraken, 4, "decode") == 22  # layer 1: no communication
    assert layer(kraken, 4, "decode", index=2) == 24  # all-reduce, add of the reduced outputs
    # outside the layers, the graph's operators by the same rule and the rest of the step (15):
    # gpt-fast's Llama 1 + 8 + 1 + 15 = 25, a GPT-2 block's model (learned positions, LayerNorm)
    # embedding gather and position add 2, final LayerNorm and LM head 2, and its all-gather of
    # the logits at TP > 1
    for cfg, tp, expected in ((llama, 1, (1, 8 + 1 + 15)), (gpt, 1, (2, 2 + 15)),
                              (gpt, 4, (2, 3 + 15))):
        graphs = model_graphs(cfg, tp, 1, 1, 64, "decode", 2, options=options)
        assert (issued_kernels(graphs[0], eager, "decode"),
                issued_kernels(graphs[-1], eager, "decode")) == expected
    # with no counts set every operator is one kernel: the graph's count
    plain = dataclasses.replace(eager, issued_kernels=IssuedKernels())
    graphs = model_graphs(gpt, 4, 1, 1, 64, "decode", 2, options=options)
    assert issued_kernels(graphs[1], plain, "decode") == len(graphs[1].ops)


def test_eager_profile_reproduces_gpt_fasts_eager_llama_7b_token_on_a100():
    """The `eager` profile's host.per_kernel_s is the PyTorch blog's eager LLaMA-7B token on an
    A100 (25.5 tok/s: 39.22 ms) divided by the kernels gpt-fast's eager decode step issues
    (benchmarks/hf_eager_op_count.py --gpt-fast-model-py, gpt-fast@87041526: 56 per layer, 25
    outside: the embedding gather 1, final RMSNorm 8, LM head 1 and 15 besides them), so
    batch-1 decode of a 7B Llama (32 layers) gives that 39.2 ms back: every graph is
    host-bound (its GPU time < its kernels x 21.6 us). The former 30 us with the graph's 12
    operators per layer gave 11.7 ms."""
    from krakenlm.simulator.run import _graph_options, issued_kernels

    eager = load_software("eager")
    blog_token_s = 1 / 25.5
    cfg = get_preset("llama2-7b")
    graphs = model_graphs(cfg, 1, 1, 1, 129, "decode", 2,
                          options=_graph_options(eager, "fused", "gpu"))
    issued = [issued_kernels(g, eager, "decode") for g in graphs]
    assert issued == [1, 56, 8 + 1 + 15]
    kernels = issued[0] + cfg.n_layers * issued[1] + issued[2]
    assert (cfg.n_layers, kernels) == (32, 1817)
    assert eager.host.per_kernel_s == pytest.approx(blog_token_s / kernels, rel=1e-3)
    result = simulate(cfg, A100, 1, 1, 128, 129, software=eager, check_memory=False,
                      check_context=False)
    assert result.tpot_s == pytest.approx(blog_token_s, rel=0.002)


def test_kv_append_must_be_in_place_or_concat():
    data = {"name": "x", "kernels": "trtllm", "attention": {"kv_append": "concat"}}
    assert profile_from_dict(data, "f").attention.kv_append == "concat"
    with pytest.raises(SoftwareError, match="attention.kv_append: 'append' is not one of"):
        profile_from_dict({"name": "x", "kernels": "trtllm",
                           "attention": {"kv_append": "append"}}, "f")


def test_vllm_v0_decode_splits_mha_kv_where_v1s_fa2_varlen_kernel_does_not():
    """vLLM V0 decodes with FA2's flash_attn_with_kvcache (or PagedAttention v2), which splits
    the KV of every head layout; the A100 vLLM table is of V1's FA2 varlen decode, which splits
    only GQA rows (structure split_mha false). With `attention.decode_splits_mha` an MHA model's
    small-batch decode attention is split and faster; a GQA model's is unchanged, and so are
    tables whose kernel already splits MHA (A100 SGLang's) or is another form (H100's FA3)."""
    from krakenlm.simulator.constants.gpu_kernels import shipped_named
    from krakenlm.simulator.kernels.gpu.attention import SplitKVStructure, splitting_mha

    v0 = load_software("vllm-v0")
    assert v0.attention.decode_splits_mha
    assert not load_software("vllm").attention.decode_splits_mha
    plain = dataclasses.replace(v0, attention=dataclasses.replace(
        v0.attention, decode_splits_mha=False))

    a100 = shipped_named("A100").entry("vllm", "generation_attention", "bf16")
    assert a100.structure == SplitKVStructure(2, False, True)
    split, fw = splitting_mha((a100, "vllm"))
    assert fw == "vllm" and split.structure == SplitKVStructure(2, True, True)
    assert split.params == a100.params
    h100 = shipped_named("H100").entry("vllm", "generation_attention", "bf16")
    assert splitting_mha((h100, "vllm"))[0] is h100  # FlashAttention-3's form: not split-KV's
    sglang = shipped_named("A100").entry("sglang", "generation_attention", "bf16")
    assert sglang.structure.split_mha and splitting_mha((sglang, "sglang"))[0] is sglang

    def attention_s(model, software, system="a100-40gb-x8", tp=4):
        r = simulate(get_preset(model), load_system(system), tp, 1, 1024, 16, software=software)
        return r.decode.ops["attention"]["time_s"]

    # Llama-2-7B at TP 4: 8 MHA heads a GPU, 8 CTAs unsplit on 108 SMs
    assert attention_s("llama2-7b", v0) < 0.7 * attention_s("llama2-7b", plain)
    assert attention_s("mistral-7b", v0) == pytest.approx(attention_s("mistral-7b", plain),
                                                          rel=1e-12)
    assert attention_s("llama2-7b", v0, "h100-80gb-x8") == pytest.approx(
        attention_s("llama2-7b", plain, "h100-80gb-x8"), rel=1e-12)


def test_decode_splits_mha_must_be_a_boolean():
    with pytest.raises(SoftwareError, match=r"^f: attention\.decode_splits_mha: expected true or "
                                            r"false, got 'yes'"):
        profile_from_dict({"name": "x", "kernels": "vllm",
                           "attention": {"decode_splits_mha": "yes"}}, "f")


def test_vllm_v0_reduced_with_nccl_before_its_custom_all_reduce():
    """vLLM's custom all-reduce shipped in 0.3.0 (vllm-project/vllm#2192): a row of an older
    engine (PR #2192's "before" row, vLLM main at 0.2.6) reduces with NCCL; the PR's "after" row
    and later versions with the custom kernel; a query (no version) keeps the profile's."""
    from krakenlm.simulator.measurements.harness import engine_era, row_results
    from krakenlm.simulator.measurements.models import load_rows
    from krakenlm.simulator.run import resolve_model

    v0 = load_software("vllm-v0")
    assert v0.collectives.custom_since == "0.3.0" and "2192" in v0.sources["VCS"]
    assert engine_era(v0, "0.2.6 (main before PR #2192)", "vllm", "nvidia").collectives.all_reduce \
        == "nccl"
    for version in ("0.3.0.dev0 (0.2.6 + PR #2192)", "0.5.4", ""):
        assert engine_era(v0, version, "vllm", "nvidia") is v0, version

    rows = sorted((r for r in load_rows() if r.source == "vllm_pr2192"), key=lambda r: r.version)
    assert [r.version for r in rows] == ["0.2.6 (main before PR #2192)",
                                         "0.3.0.dev0 (0.2.6 + PR #2192)"]
    before, after = (row_results(r, resolve_model(r.model)[1], v0)[0] for r in rows)
    assert before.profile.collectives.all_reduce == "nccl"
    assert after.profile.collectives.all_reduce == "custom"
    assert before.e2e_s > after.e2e_s  # at TP 4, batch 64: NCCL's 1 MB all-reduces are slower


def test_lmdeploy_turbomind_0_1_reduces_with_nccl():
    """TurboMind 0.1's Python API creates the model with enable_custom_all_reduce 0 and no
    custom communicator (source LN), so its tensor-parallel rows reduce with NCCL: LMDeploy's
    Llama-2-70B TP 4 decode step is slower than with the custom kernel the profile claimed."""
    from krakenlm.simulator.measurements.harness import simulate_row_times
    from krakenlm.simulator.measurements.models import load_rows
    from krakenlm.simulator.run import resolve_model

    p = load_software("lmdeploy")
    assert p.collectives.all_reduce == "nccl"
    assert "enable_custom_all_reduce" in p.sources["LN"]
    custom = dataclasses.replace(p, collectives=dataclasses.replace(p.collectives,
                                                                    all_reduce="custom"))
    row = next(r for r in load_rows() if r.source == "lmdeploy_v010a1" and r.tp == 4
               and r.metric == "tpot")
    cfg = resolve_model(row.model)[1]
    assert simulate_row_times(row, cfg, p)[1] > simulate_row_times(row, cfg, custom)[1]
