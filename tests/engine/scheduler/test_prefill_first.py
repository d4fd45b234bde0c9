"""vLLM v0's prefill-first scheduler: a step is all prefill or all decode."""

from sim.engine.kv_cache import KVCache
from sim.engine.scheduler.prefill_first import PrefillFirstScheduler
from tests.engine.scheduler.steps import decodes, prefills, req, shape, step


def test_prefill_first_steps_are_all_prefill_or_all_decode():
    sched = PrefillFirstScheduler(KVCache(100, 4), max_num_batched_tokens=64)
    r0 = req(0, 5, 10)
    sched.add(r0)
    plan, _ = step(sched, 1.0)
    assert prefills(plan) == [(0, 5)] and decodes(plan) == []
    plan, _ = step(sched, 2.0)
    assert decodes(plan) == [0] and prefills(plan) == []
    sched.add(req(1, 7, 10))
    sched.add(req(2, 3, 10))
    plan, _ = step(sched, 3.0)
    assert prefills(plan) == [(1, 7), (2, 3)] and decodes(plan) == []  # r0 stalls
    assert shape(plan) == (10, 0, 49 + 9, 0)
    assert r0.num_generated == 2
    plan, _ = step(sched, 4.0)
    assert decodes(plan) == [0, 1, 2] and prefills(plan) == []
    assert shape(plan) == (0, 3, 0, (5 + 2) + (7 + 1) + (3 + 1))


def test_prefill_first_decodes_when_the_waiting_head_does_not_fit():
    kv = KVCache(6, 4, watermark=0.0)
    sched = PrefillFirstScheduler(kv, max_num_batched_tokens=64)
    sched.add(req(0, 16, 10))  # 4 blocks
    step(sched, 1.0)
    sched.add(req(1, 12, 1))  # 3 blocks, only 2 free
    plan = sched.schedule()
    assert decodes(plan) == [0] and prefills(plan) == []
    assert [r.request_id for r in sched.waiting] == [1]


def test_prefill_first_prefill_budget_caps_whole_prompts():
    sched = PrefillFirstScheduler(KVCache(100, 4), max_num_batched_tokens=10)
    for i, p in enumerate((4, 5, 3)):
        sched.add(req(i, p, 4))
    plan, _ = step(sched, 1.0)
    assert prefills(plan) == [(0, 4), (1, 5)]  # + 3 would exceed 10
    plan, _ = step(sched, 2.0)
    assert prefills(plan) == [(2, 3)] and decodes(plan) == []
