"""The kernel counts the `hf` engine era issues (measurements/harness.py EAGER_OP_ENGINES) are
the ones benchmarks/hf_eager_op_count.py counts on the installed transformers' Llama, and the
counting rule excludes what launches no kernel."""

import pytest

from benchmark_module import load_benchmark
from krakenlm.simulator.measurements.harness import EAGER_OP_ENGINES

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
# the version the shipped counts were measured with (its model-level and generate code count
# outside the layers; another version may count differently: re-run the script)
MEASURED_WITH = "5.24.0"

count = load_benchmark("hf_eager_op_count")
ERA = "v4.35-bettertransformer"


def test_views_and_allocations_launch_no_kernel():
    aten = torch.ops.aten
    for op in (aten.view.default, aten.transpose.int, aten.t.default, aten.slice.Tensor,
               aten.unsqueeze.default, aten.expand.default, aten._unsafe_view.default,
               aten.empty.memory_format, aten.detach.default):
        assert not count.launches_kernel(op), op
    for op in (aten.mm.default, aten.add.Tensor, aten._to_copy.default, aten.cat.default,
               aten.index.Tensor, aten.mean.dim):
        assert count.launches_kernel(op), op


# The first TorchDispatchMode imports torch._dynamo (~6 s here), hence `slow`.
@pytest.mark.slow
def test_the_counter_skips_views_and_counts_copies():
    x = torch.ones(4, 4)
    assert sum(count.count_kernels(lambda: x.reshape(16)[2:].unsqueeze(0).t()).values()) == 0
    # a reshape that cannot be a view copies: the dispatcher runs it as a clone, one kernel
    assert dict(count.count_kernels(lambda: x.t().reshape(16))) == {"clone": 1}
    assert dict(count.count_kernels(lambda: (x @ x).float().sum())) == {"mm": 1, "sum": 1}


@pytest.mark.slow
@pytest.mark.skipif(transformers.__version__ != MEASURED_WITH,
                    reason=f"counts measured with transformers {MEASURED_WITH}")
def test_the_hf_era_counts_are_the_measured_ones():
    """Per layer = count(2 layers) - count(1 layer) of the era's forward; the engine era carries
    exactly these, and the decode step outside the layers adds generate's own step work."""
    one, two = count.forward_counts(1, ERA), count.forward_counts(2, ERA)
    issued = EAGER_OP_ENGINES["hf"]
    fields = count.issued_fields(one, two)
    step = sum(count.generate_step_counts(ERA).values())
    # a decode step's outside adds generate's own loop (the step minus the model's forward)
    fields["outside_layers_decode"] += step - sum(one["decode"].values())
    assert fields == {name: getattr(issued, name) for name in fields}
    # the parts add up to the layer: two norms, RoPE, attention, gated MLP, two residual adds
    layer = {p: sum(two[p].values()) - sum(one[p].values()) for p in ("prefill", "decode")}
    for p in ("prefill", "decode"):
        assert layer[p] == (2 * fields["rmsnorm"] + fields["rope"] + fields[f"attention_{p}"]
                            + fields["gated_mlp"] + 2)
    assert layer == {"prefill": 40, "decode": 42}
    # outside the layers: the embedding gather, final RMSNorm and LM head (the graph's
    # operators) and the rest
    head = 1 + fields["rmsnorm"] + 1
    assert issued.outside_layers_prefill + head == sum(one["prefill"].values()) - layer["prefill"]
    assert issued.outside_layers_decode + head == step - layer["decode"]
    # the era's RoPE gathers cos / sin per layer and the decode step concatenates K and V
    by_op = dict(two["decode"])
    assert by_op["index"] - dict(one["decode"]).get("index", 0) == 2
    assert by_op["cat"] - dict(one["decode"])["cat"] == 4  # rotate_half x 2, K, V


@pytest.mark.slow
def test_the_hf_era_elementwise_bytes_are_the_counted_ones():
    """The era's bytes per element (EAGER_OP_ENGINES) reproduce the counted prefill layer of a
    tiny config per token: two RMSNorms (plus their per-row statistics, 48 B, and the weight's
    2 x 2 x hidden B read per forward), RoPE on q and k (plus the cos / sin gathers,
    16 x head_dim + 16 B at batch 1), SiLU x up, and the residual adds at the graph's 6."""
    hidden, inter, heads = count.BYTES_CONFIGS[0]
    one = count.elementwise_bytes(1, hidden, inter, heads)["prefill"]
    two = count.elementwise_bytes(2, hidden, inter, heads)["prefill"]
    tokens = count.PROMPT_TOKENS
    per = {k: (two[k] - one[k]) / tokens for k in ("norm", "rope", "activation", "residual")}
    issued = EAGER_OP_ENGINES["hf"]
    head_dim = hidden // heads
    assert per["norm"] == 2 * hidden * issued.rmsnorm_bytes_per_element + 48 + 4 * hidden / tokens
    assert per["rope"] == 2 * hidden * issued.rope_bytes_per_element + 16 * head_dim + 16
    assert per["activation"] == inter * issued.swiglu_bytes_per_element
    assert per["residual"] == 2 * hidden * 6


@pytest.mark.slow
def test_a_layernorm_and_a_tanh_gelu_are_one_kernel_each():
    """What the eager profile's per-part rule (run.py `layer_kernels`) takes for the parts it
    has no count of: a GPT-2 block's LayerNorm and GELU (tanh) are one ATen kernel each, a
    Linear with bias one addmm."""
    x, w = torch.ones(4, 8), torch.ones(8)
    assert dict(count.count_kernels(
        lambda: torch.nn.functional.layer_norm(x, (8,), w, w))) == {"native_layer_norm": 1}
    assert dict(count.count_kernels(
        lambda: torch.nn.functional.gelu(x, approximate="tanh"))) == {"gelu": 1}
    linear = torch.nn.Linear(8, 8)
    with torch.no_grad():
        assert dict(count.count_kernels(lambda: linear(x))) == {"addmm": 1}


def test_gpt_fast_option_without_the_file_is_a_one_line_error(tmp_path, capsys):
    """The gpt-fast count imports the user's gpt-fast model.py (not in this repository); a
    path that is not a file stops with one `error:` line, before importing torch."""
    import sys
    missing = tmp_path / "gpt-fast" / "model.py"
    argv = sys.argv
    sys.argv = ["hf_eager_op_count.py", "--gpt-fast-model-py", str(missing)]
    try:
        with pytest.raises(SystemExit) as stop:
            count.main()
    finally:
        sys.argv = argv
    message = str(stop.value)
    assert message.startswith("error: --gpt-fast-model-py ") and str(missing) in message
    assert "\n" not in message


def test_gpt_fast_option_rejects_a_file_that_is_not_gpt_fast(tmp_path):
    other = tmp_path / "model.py"
    other.write_text("x = 1\n")
    with pytest.raises(SystemExit, match=r"^error: .*no `ModelArgs`"):
        count.load_gpt_fast_model(str(other))
