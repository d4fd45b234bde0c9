"""Sarathi-Serve: decodes first and never stalled, then prefill chunks up to ``chunk_size``."""

from sim.engine.kv_cache import KVCache
from sim.engine.scheduler.sarathi import SarathiScheduler
from tests.engine.scheduler.steps import decodes, prefills, req, shape, step


def test_sarathi_decodes_first_then_chunks_up_to_chunk_size():
    sched = SarathiScheduler(KVCache(100, 4), chunk_size=4, max_num_batched_tokens=8192)
    r0, r1 = req(0, 2, 10), req(1, 10, 10)
    sched.add(r0)
    sched.add(r1)
    plan, _ = step(sched, 1.0)
    assert prefills(plan) == [(0, 2), (1, 2)]  # 4 tokens in all
    assert shape(plan) == (4, 0, 4 + 4, 0)
    sched.add(req(2, 5, 5))
    plan, _ = step(sched, 2.0)
    assert decodes(plan) == [0]
    assert prefills(plan) == [(1, 3)]  # part-way prompt first; nothing left for r2
    assert shape(plan) == (3, 1, 3 * (2 + 3), 3)
    plan, _ = step(sched, 3.0)
    assert decodes(plan) == [0] and prefills(plan) == [(1, 3)]
    plan, _ = step(sched, 4.0)
    assert decodes(plan) == [0] and prefills(plan) == [(1, 2), (2, 1)]
    assert sched.running[-1].request_id == 2


def test_sarathi_decodes_are_never_stalled_by_a_long_prompt():
    sched = SarathiScheduler(KVCache(1000, 4), chunk_size=6, max_num_batched_tokens=8192)
    for i in range(3):
        sched.add(req(i, 1, 50))
    step(sched, 1.0)
    sched.add(req(3, 200, 5))
    for t in range(2, 40):
        plan, _ = step(sched, float(t))
        assert decodes(plan) == [0, 1, 2]
        assert plan.num_prefill_tokens <= 3  # 6 - 3 decode tokens
    assert sched.running[-1].num_computed_tokens == 3 * 38
