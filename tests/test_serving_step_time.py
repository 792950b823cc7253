"""The serving simulator's step-time oracle against direct `Simulator.run` calls: exact at
grid points, within 1 % (median) and 5 % (worst) off the grid, for the standard block and
Kraken; attention adds to a standard step in full; a chunk after context costs its extra
causal queries."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from krakenlm.models import get_preset
from krakenlm.serving.step_time import StepTimer, token_grid
from krakenlm.simulator import Simulator, arch_variant

TP = 2


@functools.cache
def oracle(arch: str) -> tuple[Simulator, object, StepTimer]:
    config = arch_variant(get_preset("gpt3-1.3b"), arch, TP)
    sim = Simulator("h100-80gb-x8", "vllm")
    # the engine's graphs as `Simulator.run` takes them, up to 512 tokens (vLLM V1's default
    # knob; max_num_seqs 64 alone would capture up to 128: `Graphs.largest_captured`)
    return sim, config, StepTimer(sim, config, TP, max_tokens=2048, max_sequences=64,
                                  capture_max=512)


def _prefill(sim, config, prompt):
    return sim.run(config, TP, 1, prompt, 2, check_memory=False).prefill.time_s


def _decode(sim, config, batch, kv):
    # the first decode step attends to prompt + 1 tokens
    return float(sim.run(config, TP, batch, kv - 1, 2, check_memory=False).decode.step_times_s[0])


def test_token_grid_keeps_every_aligned_count_and_the_one_after():
    grid = token_grid(1000)
    assert grid[:65] == list(range(1, 66))
    assert {128, 129, 512, 513, 576, 577, 1000} <= set(grid) and 130 not in grid
    assert grid == sorted(set(grid)) and grid[-1] == 1000


@pytest.mark.parametrize("arch,rel", [("gpt", 1e-6), ("kraken", 5e-3)])
def test_grid_points_equal_the_simulator(arch, rel):
    """On the token grid the standard block is exact; Kraken's overlap residual still
    interpolates over the attention time (its grid is in fractions of the collective time)."""
    sim, config, st = oracle(arch)
    for prompt in (1, 17, 64, 512, 513, 1024):  # on the token grid, no context
        assert st.batch_s([(prompt, 0)], []) == pytest.approx(_prefill(sim, config, prompt),
                                                               rel=rel)
    for batch, kv in ((1, 16), (8, 16), (64, 16)):  # decode: grid batch and KV length
        assert st.batch_s([], [kv] * batch) == pytest.approx(_decode(sim, config, batch, kv),
                                                             rel=rel)


@pytest.mark.parametrize("arch", ["gpt", "kraken"])
def test_off_grid_points_are_within_one_percent_median_five_worst(arch):
    sim, config, st = oracle(arch)
    rng = np.random.default_rng(7)
    errors = []
    for prompt in rng.integers(66, 2000, 12):
        errors.append(st.batch_s([(int(prompt), 0)], []) / _prefill(sim, config, int(prompt)) - 1)
    for batch, kv in zip(rng.integers(1, 65, 12), rng.integers(17, 2000, 12)):
        direct = _decode(sim, config, int(batch), int(kv))
        errors.append(st.batch_s([], [int(kv)] * int(batch)) / direct - 1)
    errors = np.abs(errors)
    assert np.median(errors) <= 0.01, errors
    assert errors.max() <= 0.05, errors


def test_attention_adds_in_full_to_a_standard_step():
    """The standard block cannot overlap attention with a collective: each second of attention
    per layer adds one per layer to the step (prefill steps replay CUDA graphs under vLLM)."""
    _, config, gpt = oracle("gpt")
    for tokens in (7, 256, 1500):
        added = gpt.step_s(tokens, 4, 4, 1e-4, True) - gpt.step_s(tokens, 4, 4, 0.0, True)
        assert added == pytest.approx(1e-4 * config.n_layers, rel=1e-6)


def test_a_chunk_after_context_costs_the_extra_causal_queries():
    _, _, st = oracle("gpt")
    f = st.prefill_attention_s
    assert f(512, 0) == pytest.approx(st._prefill_attention(512))
    # later queries attend to more keys: the same chunk costs more after a long context
    assert f(512, 1536) > f(512, 0)
    F = st._prefill_attention
    assert f(512, 1536) == pytest.approx(F(1) + F(2048) - F(1536))
    # never below the chunk alone (the kernel's floor)
    assert f(16, 1000) >= f(16, 0)


@pytest.mark.parametrize("arch", ["gpt", "kraken", "parallel"])
def test_a_decode_windows_first_step_equals_step_s_to_a_few_ulps(arch):
    """The decode window (`V1Engine._window_steps`) skips `step_s` for its first step's bound
    when the bound cannot bind, trusting that `decode_steps_s`'s first duration equals it to
    far better than its 1e-9 margin (the two interpolate the same tables in another order)."""
    _, _, st = oracle(arch)
    rng = np.random.default_rng(11)
    worst = 0.0
    for _ in range(400):
        d = int(rng.integers(1, 80))  # past the 64-sequence table too
        kv = float(rng.uniform(1, 2048))
        first = st.step_s(d, d, d, st.decode_attention_s(d, kv), False)
        vectorised = float(st.decode_steps_s(d, kv, 3)[0])
        worst = max(worst, abs(first - vectorised) / first)
    assert worst < 1e-12


@pytest.mark.parametrize("arch", ["gpt", "kraken", "parallel"])
def test_decode_steps_list_equals_the_array_formula_bit_for_bit(arch):
    """`decode_steps_list` (Python floats for short windows) gives exactly the floats of
    `decode_steps_s` (the array formula), inside and past the tables, short and long windows;
    GPT's plans take the short path (Kraken's and the parallel block's may not)."""
    _, _, st = oracle(arch)
    rng = np.random.default_rng(5)
    for _ in range(300):
        d = int(rng.integers(1, 80))
        kv = float(rng.uniform(1, 2048))
        steps = int(rng.integers(1, 80))  # past SCALAR_STEPS and LINE_STEPS too
        assert st.decode_steps_list(d, kv, steps) == st.decode_steps_s(d, kv, steps).tolist()
    if arch == "gpt":
        assert all(p.scalar is not None for p in st._decode_plans.values())


def test_interp_run_equals_numpy_interp_bit_for_bit():
    """`_interp_run` (numpy.interp's arithmetic on Python floats, for short decode windows)
    gives exactly numpy.interp's floats: inside one interval, across grid points, at them,
    below the first and past the last."""
    from krakenlm.serving.step_time import _interp_run
    _, _, st = oracle("gpt")
    row = st._decode_attention[3]
    xs, ys = row.x, row.y
    rng = np.random.default_rng(7)
    starts = [float(x) for x in xs[:5]] + [xs[0] - 3.0, xs[-1] - 2.5, xs[-1] + 1.0]
    starts += [float(rng.uniform(xs[0] - 5, xs[-1] + 5)) for _ in range(500)]
    starts += [float(rng.integers(int(xs[0]) - 5, int(xs[-1]) + 5)) for _ in range(500)]
    for x0 in starts:
        steps = int(rng.integers(1, 40))
        expected = np.interp(x0 + np.arange(steps, dtype=float), row.xa, row.ya).tolist()
        assert _interp_run(xs, ys, x0, steps) == expected
