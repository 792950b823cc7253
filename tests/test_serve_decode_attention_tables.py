"""The arithmetic of benchmarks/serve_decode_attention_tables.py: the grid interpolation both
the table and the model go through, and a run's running batch and KV length."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from benchmark_module import load_benchmark

gap = load_benchmark("serve_decode_attention_tables", "benchmarks_serve_decode_attention_tables")

# (batch, kv_len) -> (table, model, fit half): latency = batch x kv_len (table), x 2 (model)
ROWS = {(b, k): (b * k, 2.0 * b * k, True) for b in (8, 16, 32) for k in (256, 512, 1024)}


def test_bilinear_returns_the_grid_rows_and_is_linear_between_them():
    assert gap.bilinear(ROWS, 16, 512, 0) == 16 * 512
    assert gap.bilinear(ROWS, 16, 512, 1) == 2 * 16 * 512
    # linear in each axis: halfway in both is the mean of the four corners
    assert gap.bilinear(ROWS, 12, 384, 0) == pytest.approx((8 + 16) / 2 * (256 + 512) / 2)


def test_bilinear_doubles_half_the_batch_where_the_table_has_no_row():
    rows = {k: v for k, v in ROWS.items() if k != (32, 1024)}
    assert gap.bilinear(rows, 32, 1024, 0) == 2 * 16 * 1024
    assert gap.bilinear(rows, 24, 768, 0) == pytest.approx(24 * 768)  # product is bilinear


def test_poisson_conditions_follow_littles_law():
    run = SimpleNamespace(source="datacrunch", arrival="poisson", rate_per_s=4.0,
                          prompt_tokens=(100, 300), output_tokens=(50, 150),
                          measured={"itl_s": {"p50": 0.02}, "e2e_s": {"mean": 3.0}})
    batch, kv, step = gap.conditions(run)
    assert (batch, kv, step) == (12.0, 200.0 + 50.0, 0.02)


def test_burst_conditions_weigh_each_request_step_once():
    # two requests from step 1: (prompt 10, 1 output) and (prompt 20, 3 outputs)
    run = SimpleNamespace(source="llmk8s", arrival="burst", rate_per_s=None,
                          prompt_tokens=(10, 20), output_tokens=(1, 3), ttfts_s=(0.1, 0.1),
                          measured={"tpot_s": {"mean": 0.03}})
    batch, kv, step = gap.conditions(run)
    # steps: t=1 runs both (KV 11, 21), t=2 and t=3 the second (22, 23): 4 request-steps
    assert batch == pytest.approx((2 * 2 + 1 + 1) / 4)
    assert kv == pytest.approx((2 * 16 + 22 + 23) / 4)
    assert step == 0.03
