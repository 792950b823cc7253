"""KV cache sizing against engines' startup logs (serving/kv_logs.py, data/kv_cache_logs.json)
and the device total the sizing takes its fraction of (memory.runtime_visible_bytes)."""

from __future__ import annotations

import json

import pytest

from krakenlm.hardware import load_system
from krakenlm.hardware.schema import HardwareError, system_from_dict, system_to_dict
from krakenlm.models import get_preset
from krakenlm.serving.kv_cache import (PROFILE_CHARGES, KVCacheError, kv_cache_software,
                                       profile_run_bytes, size_kv_cache, with_accounting)
from krakenlm.serving.kv_logs import (LOGS_FILE, KVLogDataError, accounting, load_logs, predict,
                                      relative_error)
from krakenlm.simulator import Simulator
from krakenlm.simulator.constants.software import (KV_ACCOUNTINGS, KVProfile, SoftwareError,
                                                   load_software, profile_from_dict)
from krakenlm.simulator.memory import RUNTIME_RESERVE_BYTES, activation_bytes, memory_use

GIB = 2**30


def _log(log_id):
    return next(log for log in load_logs() if log.id == log_id)


def test_every_log_states_its_setup_and_source():
    logs = load_logs()
    raw = {entry["id"]: entry for entry in json.loads(LOGS_FILE.read_text())["logs"]}
    assert len(logs) >= 8
    assert len(raw) == len(logs)
    for log in logs:
        assert log.locator and log.line and log.engine_version
        line = log.line.replace(",", "")
        gib = raw[log.id].get("logged_kv_gib")
        if gib is not None:  # the KV memory in GiB: blocks of the model's block bytes
            assert f"{gib}GiB" in line
            assert log.logged_blocks == int(gib * GIB // predict(log).bytes_per_block)
        else:
            assert str(log.logged_blocks) in line or \
                str(log.logged_blocks * log.block_size) in line


@pytest.mark.parametrize("log_id, predicted", [
    # vLLM 0.6.3 V0 on one MI300X: 20186 logged; 18707 (-7.3 %) while the sizing took the
    # YAML's decimal 192e9 bytes instead of the 191.98 GiB the runtime reports; 20224 before
    # the SiluAndMul output was charged
    ("mi300x-llama2-7b-tp1-vllm063", 20213),
    # vLLM 0.21 V1 on one MI300X at utilisation 0.85: 74649 logged (1,194,384 tokens); 74579
    # (-0.1 %) while the sizing charged V1 the runtime reserve its init snapshot excludes;
    # 75603 (+1.3 %) before the dummy sampler run of 1024 sequences was charged
    ("mi300x-llama3.1-8b-tp1-vllm0211", 74982),
    # vLLM of December 2023 on one A100 80GB: 7351 logged (7226 before the SiluAndMul term)
    ("a100-80gb-llama2-7b-tp1-vllm-pr2031", 7215),
    # vLLM main before #2031 on 4x A100 80GB, Llama-2-70B: 31615 logged; 29911 (-5.4 %) while
    # the sizing charged the reserve that torch.cuda.max_memory_allocated() does not see
    ("a100-80gb-llama2-70b-tp4-vllm-pre2031", 31490),
    # vLLM main of 2024-12 (#10511) V0 on an H100: 27284 logged; 27534 (+0.9 %) before the
    # dummy sampler's top-k/top-p re-sort (1.04 GiB of activations, 1.26 GiB logged)
    ("h100-llama3-8b-tp1-vllm-pr10511", 27289),
    # SGLang 0.5.9 on 8x H100, Llama-3.1-70B (the serving source scicom_sglang's server_info):
    # 1,392,213 and 481,117 tokens logged at TP 8 and TP 4 (+0.1 and +0.7 %)
    ("h100-llama3.1-70b-tp8-sglang059", 1393462),
    ("h100-llama3.1-70b-tp4-sglang059", 484628),
])
def test_logged_counts_are_reproduced_within_the_goal(log_id, predicted):
    log = _log(log_id)
    blocks = predict(log).blocks
    assert blocks == predicted
    assert abs(relative_error(blocks, log)) <= 0.03


def test_sizing_takes_its_fraction_of_the_runtime_visible_total():
    system = load_system("a100-40gb-x8")
    visible = 42402064630  # 39.49 GiB, vLLM's total_gpu_memory on an A100 40GB
    assert system.device.memory.runtime_visible_bytes == visible
    config = get_preset("gpt3-1.3b")
    software = with_accounting("vllm", "total-used")
    sim = Simulator(system, software, dtype="fp16")
    sizing = size_kv_cache(sim, config, 1, gpu_memory_utilization=0.5,
                           max_num_batched_tokens=2048)
    weights = memory_use(config, system, 1, 1, 1, 1, "fp16", True, sim.precision).weights_bytes
    act = profile_run_bytes(config, 1, 2048, 256, "fp16", sim.profile.kv_profile)
    per_block = 2 * config.n_layers * config.n_heads * config.head_dim * 16 * 2
    expected = int((visible * 0.5 - weights - act - RUNTIME_RESERVE_BYTES) // per_block)
    assert sizing.capacity_bytes == visible
    assert (sizing.bytes_per_block, sizing.blocks) == (per_block, expected)
    # without the field the datasheet capacity is the total, as before
    data = system_to_dict(system)
    del data["device"]["memory"]["runtime_visible_bytes"]
    nominal = size_kv_cache(Simulator(system_from_dict(data), software, dtype="fp16"), config,
                            1, gpu_memory_utilization=0.5, max_num_batched_tokens=2048)
    assert nominal.capacity_bytes == 40 * GIB
    assert nominal.blocks == int((40 * GIB * 0.5 - weights - act - RUNTIME_RESERVE_BYTES)
                                 // per_block)


def test_a_visible_total_far_above_the_capacity_is_refused():
    data = system_to_dict(load_system("a100-80gb-x8"))
    data["device"]["memory"]["runtime_visible_bytes"] = 1e15
    with pytest.raises(HardwareError, match="runtime_visible_bytes: 1e\\+15 bytes exceeds "
                                             "capacity_bytes"):
        system_from_dict(data)


def test_a_log_without_a_field_is_named(tmp_path):
    bad = json.loads(LOGS_FILE.read_text())
    del bad["logs"][1]["logged_blocks"]
    path = tmp_path / "logs.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(KVLogDataError, match="log mi300x-llama2-7b-tp8-vllm063 lacks "
                                             "logged_blocks"):
        load_logs(path)


def test_a_log_given_twice_is_named(tmp_path):
    data = json.loads(LOGS_FILE.read_text())
    data["logs"] = [data["logs"][0], dict(data["logs"][0])]
    path = tmp_path / "logs.json"
    path.write_text(json.dumps(data))
    with pytest.raises(KVLogDataError, match=f"log {data['logs'][0]['id']} appears twice"):
        load_logs(path)


def test_unknown_engine_is_named(tmp_path):
    data = json.loads(LOGS_FILE.read_text())
    data["logs"] = [{**data["logs"][0], "engine": "tgi"}]
    path = tmp_path / "logs.json"
    path.write_text(json.dumps(data))
    with pytest.raises(KVLogDataError, match="engine 'tgi' is not one of vllm-v1, vllm-v0, "
                                             "trtllm, sglang"):
        load_logs(path)


def test_the_nvidia_hopper_presets_carry_their_logged_runtime_totals():
    # vLLM's "total_gpu_memory" on an H100 80GB (79.22 GiB, vllm#10511 / #12126) and an H200
    # (139.81 GiB); the H200's 141 GB are GiB, like every HBM capacity
    gib = 2**30
    h100 = load_system("h100-80gb-x8").device.memory
    h200 = load_system("h200-x8").device.memory
    assert round(h100.runtime_visible_bytes / gib, 2) == 79.22
    assert round(h200.runtime_visible_bytes / gib, 2) == 139.81
    assert h200.capacity_bytes == 141 * gib
    assert load_system("mi300x-x8").device.memory.capacity_bytes == 192 * gib


def test_an_fp8_kv_cache_halves_the_block_and_doubles_the_blocks():
    # Llama-2-7B, TP 1, block 64: 32 layers x 2 (K, V) x 32 heads x 128 x 64 tokens = 8 Mi
    # values a block: 16 MiB at one byte (fp8), 32 MiB at two (the auto: bf16)
    config = get_preset("llama2-7b")
    sized = {}
    for kv in ("auto", "fp8", "fp8_e5m2", "bfloat16"):
        sim = Simulator("h100-80gb-x8", kv_cache_software("trtllm", kv), dtype="fp8")
        sized[kv] = size_kv_cache(sim, config, 1, block_size=64, gpu_memory_utilization=0.99,
                                  max_num_batched_tokens=8192, of_free_memory=True)
    assert sized["auto"].bytes_per_block == sized["bfloat16"].bytes_per_block == 32 * 2**20
    assert sized["fp8"].bytes_per_block == sized["fp8_e5m2"].bytes_per_block == 16 * 2**20
    free = sized["fp8"].capacity_bytes - sized["fp8"].weights_bytes - \
        sized["fp8"].activation_bytes - RUNTIME_RESERVE_BYTES
    assert sized["fp8"].blocks == int(free * 0.99 // (16 * 2**20)) == 4450
    assert sized["auto"].blocks == int(free * 0.99 // (32 * 2**20)) == 2225
    # the weights and activations do not move with the KV dtype
    assert sized["fp8"].weights_bytes == sized["auto"].weights_bytes


def test_auto_keeps_the_profile_itself():
    assert kv_cache_software("vllm", "auto") == "vllm"
    profile = kv_cache_software("vllm", "fp8_e4m3")
    assert profile.kv_cache_dtype == "fp8" and profile.name == "vllm"
    assert profile.precision("kv_cache", "bf16") == "fp8"
    assert profile.precision("gemm", "bf16") == "bf16"  # only the KV cache changes


def test_bad_kv_cache_dtype_is_named():
    with pytest.raises(KVCacheError, match="--kv-cache-dtype 'int4' is not one of auto, fp8, "
                                           "fp8_e4m3, fp8_e5m2, bf16, bfloat16, fp16, float16"):
        kv_cache_software("vllm", "int4")


def test_decode_attention_reads_the_fp8_cache():
    # a decode step's attention reads every cached K and V value: one byte each in fp8, timed
    # by vLLM's measured FP8-cache decode kernel on an H100, so the step is faster
    config = get_preset("llama2-7b")
    times = {}
    for kv in ("auto", "fp8"):
        sim = Simulator("h100-80gb-x8", kv_cache_software("vllm", kv), dtype="fp16")
        r = sim.run(config, tp=1, batch=16, prompt_tokens=3000, gen_tokens=64)
        times[kv] = r
        variant = "fp8" if kv == "fp8" else "bf16"
        assert f"on H100 ({variant};" in sim.timer.sources["generation_attention"]
    assert times["fp8"].tpot_s < 0.9 * times["auto"].tpot_s
    assert times["fp8"].memory.kv_cache_bytes * 2 == times["auto"].memory.kv_cache_bytes


def test_the_trtllm_fp8_log_is_scored_with_its_fp8_cache():
    # trtllm-bench 0.12 on an H100 80GB, Llama-2-7b FP8 with an FP8 KV cache: 4607 logged;
    # with a 16-bit cache the sizing gave 2225 (-51.7 %)
    log = _log("h100-llama2-7b-tp1-trtllm012-fp8kv")
    assert log.kv_cache_dtype == "fp8" and log.engine == "trtllm"
    sizing = predict(log)
    assert (sizing.blocks, sizing.bytes_per_block) == (4450, 16 * 2**20)
    assert round(100 * relative_error(sizing.blocks, log), 1) == -3.4


def test_a_log_with_an_unknown_kv_cache_dtype_is_named(tmp_path):
    data = json.loads(LOGS_FILE.read_text())
    data["logs"] = [{**data["logs"][0], "kv_cache_dtype": "nvfp4"}]
    path = tmp_path / "logs.json"
    path.write_text(json.dumps(data))
    with pytest.raises(KVLogDataError, match="kv_cache_dtype 'nvfp4' is not one of auto"):
        load_logs(path)


def test_the_sglang_log_is_scored_in_tokens():
    # SGLang bench_latency on one MI300X, Meta-Llama-3-8B: max_total_num_tokens=1256440 at
    # its page of one token. SGLang's share (0.88) holds the weights and the KV pool only
    # ("free-share": profile_max_num_token): 0.88 x 191.98 GiB - 14.96 GiB of weights, no
    # activations, no reserve; +0.4 % (the CUDA context, 0.65 GiB here, is taken as 0).
    # Under vLLM's "total-used" it was 1235840, -1.6 %.
    log = _log("mi300x-llama3-8b-tp1-sglang-2024-10")
    sizing = predict(log)
    assert (sizing.block_size, sizing.bytes_per_block) == (1, 32 * 8 * 128 * 2 * 2)
    assert (sizing.activation_bytes, sizing.reserve_bytes) == (0, 0)
    assert sizing.blocks == int((sizing.capacity_bytes * 0.88 - sizing.weights_bytes)
                                // sizing.bytes_per_block) == 1261444
    assert round(100 * relative_error(sizing.blocks, log), 1) == 0.4


def test_sglangs_share_holds_no_activations():
    # the token budget sets vLLM's profile run, not SGLang's pool: the same pool at 2048 and
    # 16384 tokens, larger than vLLM's total-used sizing by its activations and reserve
    config = get_preset("llama3-8b")
    sim = Simulator("h100-80gb-x8", "sglang", dtype="bf16")
    small, large = (size_kv_cache(sim, config, 1, max_num_batched_tokens=t,
                                  gpu_memory_utilization=0.88) for t in (2048, 16384))
    assert small == large
    vllm_like = size_kv_cache(Simulator("h100-80gb-x8", with_accounting("sglang", "total-used"),
                                        dtype="bf16"), config, 1,
                              max_num_batched_tokens=16384, gpu_memory_utilization=0.88)
    assert vllm_like.activation_bytes > 0 and vllm_like.reserve_bytes == RUNTIME_RESERVE_BYTES
    gained = (vllm_like.activation_bytes + vllm_like.reserve_bytes) // large.bytes_per_block
    assert large.blocks - vllm_like.blocks in (gained, gained + 1)


def test_sglangs_mem_fraction_static_outside_zero_one_is_refused():
    sim = Simulator("h100-80gb-x8", "sglang", dtype="bf16")
    for share in (0.0, -0.1, 1.2):
        with pytest.raises(KVCacheError, match=r"must be in \(0, 1\], got"):
            size_kv_cache(sim, get_preset("llama3-8b"), 1, gpu_memory_utilization=share)


def test_the_profile_accounting_sets_what_is_charged_besides_weights_and_activations():
    # "total-used" (vLLM 0.2.5 to V1 before #19312) charges the runtime reserve; "torch-peak"
    # (vLLM up to 0.2.4) and "since-init" (V1 since #19312) charge nothing outside torch's
    # allocations: the same sizing with the reserve's blocks back
    config = get_preset("llama3-8b")
    sized = {charges: size_kv_cache(Simulator("a100-40gb-x8", with_accounting("vllm", charges),
                                              dtype="bf16"), config, 1,
                                    max_num_batched_tokens=8192)
             for charges in PROFILE_CHARGES}
    default = size_kv_cache(Simulator("a100-40gb-x8", "vllm", dtype="bf16"), config, 1,
                            max_num_batched_tokens=8192)
    assert sized["since-init"] == default  # the vllm profile is V1 since #19312
    total_used = sized["total-used"]
    assert total_used.reserve_bytes == RUNTIME_RESERVE_BYTES
    per_block = total_used.bytes_per_block
    # "free-share" (SGLang) charges neither the reserve nor the activations
    assert sized["free-share"].activation_bytes == sized["free-share"].reserve_bytes == 0
    assert sized["free-share"].blocks == int(
        (total_used.capacity_bytes * 0.9 - total_used.weights_bytes) // per_block)
    for charges in ("torch-peak", "since-init"):
        assert sized[charges].reserve_bytes == 0
        free = total_used.capacity_bytes * 0.9 - total_used.weights_bytes - \
            total_used.activation_bytes
        assert sized[charges].blocks == int(free // per_block)
        assert sized[charges].blocks - total_used.blocks in (
            RUNTIME_RESERVE_BYTES // per_block, RUNTIME_RESERVE_BYTES // per_block + 1)
    with pytest.raises(KVCacheError, match="profile accounting 'all' is not one of total-used"):
        with_accounting("vllm", "all")


def test_each_profile_carries_its_engines_accounting():
    # vLLM V1 since #19312 sizes since its init snapshot, V0 from v0.2.5 charges the memory in
    # use, SGLang takes its share of the free memory; TensorRT-LLM keeps the sizing it had
    # (no profile-run terms)
    assert load_software("vllm").kv_profile == KVProfile("since-init", True, 14)
    assert load_software("vllm-v0").kv_profile == KVProfile("total-used", True, 32)
    assert load_software("sglang").kv_profile == KVProfile("free-share")
    assert load_software("trtllm").kv_profile == KVProfile()
    with pytest.raises(SoftwareError, match="kv_profile.accounting: 'free' is not one of "
                                            "total-used, torch-peak, since-init"):
        profile_from_dict({"name": "x", "kernels": "vllm",
                           "kv_profile": {"accounting": "free"}}, "x.yaml")


def test_the_profile_run_peak_is_the_larger_of_the_forward_pass_and_the_sampler():
    config = get_preset("llama3-8b")  # gated MLP, 14336 wide; 128256-token vocabulary
    tokens, b = 8192, 2
    forward = activation_bytes(config, 1, 1, tokens, "bf16", True)
    silu = tokens * 14336 * b
    hidden = tokens * 4096 * b
    # no terms: the activation peak as before (TensorRT-LLM, SGLang)
    assert profile_run_bytes(config, 1, tokens, 256, "bf16", KVProfile()) == forward
    # the SiluAndMul output only
    assert profile_run_bytes(config, 1, tokens, 256, "bf16", KVProfile(gated_mlp_output=True)) \
        == forward + silu
    # V1's sampler on 256 sequences is below the forward pass: the forward peak stands
    v1 = load_software("vllm").kv_profile
    assert 256 * 128256 * 14 + hidden < forward + silu
    assert profile_run_bytes(config, 1, tokens, 256, "bf16", v1) == forward + silu
    # on 1024 sequences it is above: the sampler's tensors and the hidden states, not a sum
    assert profile_run_bytes(config, 1, tokens, 1024, "bf16", v1) == 1024 * 128256 * 14 + hidden
    # V0's re-sort on 256 sequences: 1.04 GiB (the #10511 log: 1.26 GiB of torch peak)
    v0 = load_software("vllm-v0").kv_profile
    assert profile_run_bytes(config, 1, tokens, 256, "bf16", v0) == 256 * 128256 * 32 + hidden
    # never more sequences than tokens
    assert profile_run_bytes(config, 1, 64, 256, "bf16", v0) == \
        max(activation_bytes(config, 1, 1, 64, "bf16", True) + 64 * 14336 * b,
            64 * 128256 * 32 + 64 * 4096 * b)
    # an ungated MLP has no activation output beside its input
    gpt = get_preset("gpt3-1.3b")
    assert profile_run_bytes(gpt, 1, 2048, 1, "fp16", KVProfile(gated_mlp_output=True)) == \
        activation_bytes(gpt, 1, 1, 2048, "fp16", True)


def test_the_logs_name_their_versions_accounting():
    charges = {log.id: accounting(log) for log in load_logs()}
    assert charges["a100-80gb-llama2-70b-tp4-vllm-pre2031"] == "torch-peak"
    assert charges["a100-80gb-llama2-70b-tp4-vllm-pr2031"] == "total-used"
    assert charges["a100-40gb-llama3.1-8b-tp1-vllm0151-eager"] == "since-init"
    assert charges["h100-llama2-7b-tp1-trtllm012-fp8kv"] == "total-used"
    assert charges["mi300x-llama3-8b-tp1-sglang-2024-10"] == "free-share"
    # the V1 log of 0.15.1: 10138 where 9871 are logged (+2.7 %; +3.8 % without the
    # SiluAndMul output, -6.5 % with the reserve)
    log = _log("a100-40gb-llama3.1-8b-tp1-vllm0151-eager")
    assert predict(log).blocks == 10138


def test_a_log_with_an_unknown_profile_accounting_is_named(tmp_path):
    data = json.loads(LOGS_FILE.read_text())
    data["logs"] = [{**data["logs"][0], "profile_charges": "everything"}]
    path = tmp_path / "logs.json"
    path.write_text(json.dumps(data))
    with pytest.raises(KVLogDataError, match="profile_charges 'everything' is not one of "
                                             "total-used, torch-peak, since-init"):
        load_logs(path)


def test_every_accounting_a_profile_may_name_has_its_charges():
    # the software profile validates `kv_profile.accounting` against KV_ACCOUNTINGS; the sizing
    # looks each one up in PROFILE_CHARGES, so the two lists must be the same
    assert tuple(PROFILE_CHARGES) == KV_ACCOUNTINGS
