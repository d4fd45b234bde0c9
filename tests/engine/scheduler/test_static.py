"""Static (request-level) batching: KV reserved for the whole output, finished members padded."""

from sim.engine.kv_cache import KVCache
from sim.engine.request import COMPLETED
from sim.engine.scheduler.static import StaticScheduler
from tests.engine.scheduler.steps import decodes, prefills, req, step


def test_static_batches_reserve_kv_and_pad_finished_members():
    kv = KVCache(100, 2)
    sched = StaticScheduler(kv, max_num_seqs=2)
    r0, r1, r2 = req(0, 3, 2), req(1, 3, 4), req(2, 2, 2)
    sched.add(r0)
    sched.add(r1)
    plan, _ = step(sched, 1.0)
    assert prefills(plan) == [(0, 3), (1, 3)]
    # KV reserved for prompt + output at admission: ceil(5/2) + ceil(7/2)
    assert (len(kv.blocks_of(r0)), len(kv.blocks_of(r1)), kv.num_used_blocks) == (3, 4, 7)
    sched.add(r2)

    plan, fin = step(sched, 2.0)
    assert decodes(plan) == [0, 1] and fin == [r0]
    assert r0.completion_time_s == 2.0 and r0.status == COMPLETED
    assert kv.num_used_blocks == 7  # the seat (and its KV) is held until the batch ends

    plan, fin = step(sched, 3.0)
    assert decodes(plan) == [1] and prefills(plan) == []
    assert plan.num_decode_seqs == 2  # r0 computed as padding
    assert plan.decode_context == r0.num_tokens + (3 + 2) == 5 + 5
    assert list(sched.waiting) == [r2]  # no new batch while r1 runs
    plan, fin = step(sched, 4.0)
    assert plan.num_decode_seqs == 2 and fin == [r1]
    assert kv.num_used_blocks == 7

    plan, _ = step(sched, 5.0)
    assert prefills(plan) == [(2, 2)] and decodes(plan) == []
    assert plan.num_decode_seqs == 0
    assert len(kv.blocks_of(r2)) == 2 and kv.num_used_blocks == 2  # the old batch was released


def test_static_never_preempts_because_output_is_reserved():
    kv = KVCache(8, 2)
    sched = StaticScheduler(kv, max_num_seqs=4)
    a, b = req(0, 4, 4), req(1, 4, 4)  # 4 blocks each: the pool holds both whole
    sched.add(a)
    sched.add(b)
    sched.add(req(2, 1, 1))
    for t in range(1, 5):
        plan, _ = step(sched, float(t))
        assert plan.preempted == []
    assert a.status == b.status == COMPLETED
    assert kv.num_used_blocks == 8
    plan, _ = step(sched, 5.0)
    assert prefills(plan) == [(2, 1)] and kv.num_used_blocks == 1
