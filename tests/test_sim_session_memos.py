"""A `Simulator` session's memos stay bounded (a sweep of distinct queries would grow them
without end) and forgetting changes no result."""

from krakenlm.simulator.schedule import TimedOp, schedule


def test_a_sessions_schedule_memo_stays_bounded_and_exact(monkeypatch):
    """`run._Scheduler` keeps at most SCHEDULE_MEMO_SIZE graphs (oldest dropped first) and
    gives what an unmemoised `schedule` gives, before and after an eviction."""
    from krakenlm.simulator import run

    monkeypatch.setattr(run, "SCHEDULE_MEMO_SIZE", 3)
    scheduler = run._Scheduler(core_share=0.1)

    def graph(t):
        return [TimedOp("a", "GEMM", "compute", t),
                TimedOp("ar", "AllReduce", "comm", 2.0, deps=("a",), memory_share=0.5),
                TimedOp("b", "elementwise", "compute", 1.0, bound="memory")]

    for t in (1.0, 2.0, 3.0, 4.0, 5.0):
        assert scheduler(graph(t)).total_s == schedule(graph(t), 0.1).total_s
    assert len(scheduler.cache) == 3
    assert [k[0].time_s for k in scheduler.cache] == [3.0, 4.0, 5.0]
    assert scheduler(graph(1.0)).total_s == schedule(graph(1.0), 0.1).total_s  # recomputed


def test_a_sessions_operator_memo_stays_bounded_and_exact(monkeypatch):
    """`timing.OpTimer` starts its memos afresh past TIMER_MEMO_SIZE timings, and a session
    that forgot gives the same results as a fresh one."""
    from krakenlm.models import get_preset
    from krakenlm.simulator import Simulator, timing

    cfg = get_preset("llama2-7b")
    queries = [(2, 1, 64 + 32 * i, 3) for i in range(6)]
    fresh = [Simulator("a100-80gb-x8").run(cfg, *q).e2e_s for q in queries]
    monkeypatch.setattr(timing, "TIMER_MEMO_SIZE", 8)
    sim = Simulator("a100-80gb-x8")
    timers = []
    for q, expected in zip(queries + queries, fresh + fresh):
        assert sim.run(cfg, *q).e2e_s == expected
        timers += [v for v in vars(sim).values() if isinstance(v, timing.OpTimer)]
    assert timers and all(len(t.cache) <= 8 for t in timers)
