"""Each scheduler's StepPlan on hand-built requests and a tiny KV cache, step by step.

The tests drive a scheduler the way a replica does (``schedule`` then ``on_step_end``) and
check the exact plan: who advances by how many tokens, who is preempted, and the shape numbers
P, D, Ap, Ad that step-time models read (GUIDE section 3).
"""

import pytest

from sim.kv_cache import KVCache
from sim.request import COMPLETED, RUNNING, WAITING, Request
from sim.scheduler.prefill_first import PrefillFirstScheduler
from sim.scheduler.sarathi import SarathiScheduler
from sim.scheduler.static import StaticScheduler
from sim.scheduler.vllm import VLLMScheduler


def req(rid, prompt, output, arrival=0.0) -> Request:
    return Request(rid, arrival, prompt, output)


def prefills(plan):
    return [(r.request_id, n) for r, n in plan.prefills]


def decodes(plan):
    return [r.request_id for r in plan.decodes]


def shape(plan):
    return (plan.num_prefill_tokens, plan.num_decode_seqs, plan.prefill_attn, plan.decode_context)


def step(sched, now):
    """One replica step: plan, then apply it at ``now``; return (plan, finished)."""
    plan = sched.schedule(now)
    return plan, sched.on_step_end(plan, now)


# -- vLLM ----------------------------------------------------------------------------------


def test_vllm_chunked_splits_the_budget_between_decode_and_prefill_chunk():
    sched = VLLMScheduler(KVCache(100, 4), max_num_seqs=8, max_num_batched_tokens=8)
    r0 = req(0, 4, 5)
    sched.add(r0)
    plan, _ = step(sched, 1.0)
    assert prefills(plan) == [(0, 4)] and decodes(plan) == []
    assert shape(plan) == (4, 0, 4 * 4, 0)
    assert r0.first_token_time_s == 1.0 and r0.num_generated == 1
    assert r0.is_decoding

    r1 = req(1, 10, 3)
    sched.add(r1)
    plan = sched.schedule(2.0)
    assert decodes(plan) == [0]
    assert prefills(plan) == [(1, 7)]  # budget 8 - 1 decode token
    # P = 7, D = 1, Ap = 7 * (0 + 7), Ad = prompt 4 + 1 generated
    assert shape(plan) == (7, 1, 49, 5)
    assert sched.on_step_end(plan, 2.0) == []
    assert r1.num_computed_tokens == 7
    assert r1.first_token_time_s is None  # the prompt is not done yet
    assert r1.status == RUNNING and r1.num_generated == 0

    plan = sched.schedule(3.0)
    assert decodes(plan) == [0] and prefills(plan) == [(1, 3)]
    # Ap = 3 * (7 already computed + 3); Ad = 4 + 2 generated
    assert shape(plan) == (3, 1, 30, 6)
    sched.on_step_end(plan, 3.0)
    assert r1.first_token_time_s == 3.0  # set at the end of the prompt's last chunk
    assert r1.num_generated == 1 and r1.num_computed_tokens == 10
    assert r0.num_generated == 3


def test_vllm_decode_context_sums_prompt_plus_generated():
    sched = VLLMScheduler(KVCache(100, 4), max_num_batched_tokens=64)
    a, b = req(0, 5, 10), req(1, 9, 10)
    sched.add(a)
    sched.add(b)
    plan, _ = step(sched, 1.0)
    assert prefills(plan) == [(0, 5), (1, 9)]
    assert shape(plan) == (14, 0, 25 + 81, 0)
    for t in (2.0, 3.0, 4.0):
        plan, _ = step(sched, t)
    assert decodes(plan) == [0, 1] and prefills(plan) == []
    # after the step at 3.0 both hold 3 generated tokens: (5 + 3) + (9 + 3)
    assert shape(plan) == (0, 2, 0, 8 + 12)


def test_vllm_completion_frees_kv_and_leaves_running():
    kv = KVCache(100, 4)
    sched = VLLMScheduler(kv, max_num_batched_tokens=64)
    r = req(0, 6, 3)
    sched.add(r)
    _, fin = step(sched, 1.0)
    assert fin == [] and kv.num_used_blocks == 2
    _, fin = step(sched, 2.0)
    assert fin == [] and r.num_generated == 2
    _, fin = step(sched, 3.0)
    assert fin == [r]
    assert r.status == COMPLETED and r.completion_time_s == 3.0
    assert r.num_generated == r.output_tokens == 3
    assert kv.num_used_blocks == 0 and r.num_blocks == 0
    assert sched.running == [] and not sched.has_work


def test_vllm_one_token_output_completes_with_its_prefill():
    kv = KVCache(100, 4)
    sched = VLLMScheduler(kv, max_num_batched_tokens=64)
    r = req(0, 7, 1)
    sched.add(r)
    _, fin = step(sched, 0.5)
    assert fin == [r]
    assert r.first_token_time_s == r.completion_time_s == 0.5
    assert kv.num_used_blocks == 0


def test_vllm_non_chunked_prompt_waits_for_a_step_with_room():
    sched = VLLMScheduler(KVCache(100, 4), max_num_batched_tokens=8,
                          enable_chunked_prefill=False)
    r0, r1 = req(0, 3, 3), req(1, 3, 10)
    sched.add(r0)
    sched.add(r1)
    plan, _ = step(sched, 1.0)
    assert prefills(plan) == [(0, 3), (1, 3)]
    r2 = req(2, 7, 2)
    sched.add(r2)
    plan, _ = step(sched, 2.0)
    assert decodes(plan) == [0, 1] and prefills(plan) == []  # 2 + 7 > 8: r2 waits whole
    assert list(sched.waiting) == [r2] and r2.num_computed_tokens == 0
    plan, fin = step(sched, 3.0)
    assert decodes(plan) == [0, 1] and prefills(plan) == []
    assert fin == [r0]
    plan, _ = step(sched, 4.0)
    assert decodes(plan) == [1] and prefills(plan) == [(2, 7)]  # 1 + 7 = 8 fits
    assert r2.first_token_time_s == 4.0


def test_vllm_chunked_gives_the_waiting_prompt_a_chunk_instead():
    sched = VLLMScheduler(KVCache(100, 4), max_num_batched_tokens=8)
    r0, r1 = req(0, 3, 3), req(1, 3, 10)
    sched.add(r0)
    sched.add(r1)
    step(sched, 1.0)
    sched.add(req(2, 7, 2))
    plan = sched.schedule(2.0)
    assert decodes(plan) == [0, 1] and prefills(plan) == [(2, 6)]


def test_vllm_max_num_seqs_caps_running_requests():
    sched = VLLMScheduler(KVCache(100, 4), max_num_seqs=2, max_num_batched_tokens=64)
    rs = [req(0, 2, 1), req(1, 2, 5), req(2, 2, 5)]
    for r in rs:
        sched.add(r)
    plan, fin = step(sched, 1.0)
    assert prefills(plan) == [(0, 2), (1, 2)]
    assert list(sched.waiting) == [rs[2]]
    assert fin == [rs[0]]  # one output token: done at once, its seat is free again
    plan, _ = step(sched, 2.0)
    assert decodes(plan) == [1] and prefills(plan) == [(2, 2)]
    assert len(sched.running) == 2


def test_vllm_preempts_most_recently_admitted_when_kv_runs_out():
    kv = KVCache(4, 2)  # 8 tokens in all
    sched = VLLMScheduler(kv, max_num_batched_tokens=64)
    r0, r1 = req(0, 4, 10), req(1, 4, 10)
    sched.add(r0)
    sched.add(r1)
    plan, _ = step(sched, 1.0)
    assert prefills(plan) == [(0, 4), (1, 4)]
    assert kv.num_used_blocks == 4 and kv.num_free_blocks == 0
    r2 = req(2, 1, 1)
    sched.add(r2)

    plan = sched.schedule(2.0)
    # r0's decode needs a third block: r1 (admitted last) is preempted by recompute.
    assert plan.preempted == [r1]
    assert decodes(plan) == [0]
    assert prefills(plan) == []  # no admissions in a step that preempted
    assert shape(plan) == (0, 1, 0, 5)
    assert r1.status == WAITING and r1.num_computed_tokens == 0 and r1.num_blocks == 0
    assert r1.num_preemptions == 1 and r1.num_generated == 1
    assert list(sched.waiting) == [r1, r2]  # the victim goes to the front
    assert sched.running == [r0]
    assert r0.num_blocks == 3 and kv.num_used_blocks == 3
    sched.on_step_end(plan, 2.0)
    assert r0.num_generated == 2 and r1.num_generated == 1


def test_vllm_preempted_request_recomputes_prompt_and_outputs():
    kv = KVCache(4, 2)
    sched = VLLMScheduler(kv, max_num_batched_tokens=64)
    r0, r1 = req(0, 4, 2), req(1, 4, 3)
    sched.add(r0)
    sched.add(r1)
    step(sched, 1.0)
    plan, fin = step(sched, 2.0)  # r1 preempted, r0 finishes
    assert plan.preempted == [r1] and fin == [r0]
    assert kv.num_used_blocks == 0
    plan, _ = step(sched, 3.0)
    # r1 recomputes every token but its last generated one: its 4 prompt tokens, from 0 ...
    assert prefills(plan) == [(1, 4)]
    assert shape(plan) == (4, 0, 16, 0)
    assert r1.num_generated == 1 and r1.is_decoding
    assert r1.first_token_time_s == 1.0  # the first token stays when it was first produced
    # ... then decodes that token to sample the next one (so every later token is a decode).
    plan, _ = step(sched, 4.0)
    assert decodes(plan) == [1] and shape(plan) == (0, 1, 0, 5)
    assert r1.num_generated == 2
    _, fin = step(sched, 5.0)
    assert fin == [r1] and r1.num_preemptions == 1


def test_vllm_max_prefills_per_step_prefills_one_prompt_per_step():
    sched = VLLMScheduler(KVCache(100, 4), max_num_seqs=8, max_num_batched_tokens=64,
                          enable_chunked_prefill=False, max_prefills_per_step=1)
    for i in range(3):
        sched.add(req(i, 10, 4))
    plan, _ = step(sched, 1.0)  # room for all three prompts, but one per step
    assert prefills(plan) == [(0, 10)] and decodes(plan) == []
    plan, _ = step(sched, 2.0)
    assert decodes(plan) == [0] and prefills(plan) == [(1, 10)]
    plan, _ = step(sched, 3.0)
    assert decodes(plan) == [0, 1] and prefills(plan) == [(2, 10)]
    plan, _ = step(sched, 4.0)
    assert decodes(plan) == [0, 1, 2] and prefills(plan) == []


def test_vllm_max_prefills_per_step_counts_a_running_chunked_prompt():
    # a prompt still being chunked takes the step's one prefill; the next waits for it
    sched = VLLMScheduler(KVCache(100, 4), max_num_seqs=8, max_num_batched_tokens=8,
                          max_prefills_per_step=1)
    sched.add(req(0, 12, 2))
    sched.add(req(1, 3, 2))
    plan, _ = step(sched, 1.0)
    assert prefills(plan) == [(0, 8)]
    plan, _ = step(sched, 2.0)
    assert prefills(plan) == [(0, 4)]  # budget left over, but no second prefill
    plan, _ = step(sched, 3.0)
    assert decodes(plan) == [0] and prefills(plan) == [(1, 3)]
    with pytest.raises(ValueError, match=r"^scheduler.max_prefills_per_step=0: "):
        VLLMScheduler(KVCache(100, 4), max_prefills_per_step=0)


# -- Sarathi -------------------------------------------------------------------------------


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


# -- prefill first --------------------------------------------------------------------------


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
    plan = sched.schedule(2.0)
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


# -- static --------------------------------------------------------------------------------


def test_static_batches_reserve_kv_and_pad_finished_members():
    kv = KVCache(100, 2)
    sched = StaticScheduler(kv, max_num_seqs=2)
    r0, r1, r2 = req(0, 3, 2), req(1, 3, 4), req(2, 2, 2)
    sched.add(r0)
    sched.add(r1)
    plan, _ = step(sched, 1.0)
    assert prefills(plan) == [(0, 3), (1, 3)]
    # KV reserved for prompt + output at admission: ceil(5/2) + ceil(7/2)
    assert (r0.num_blocks, r1.num_blocks, kv.num_used_blocks) == (3, 4, 7)
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
    assert r2.num_blocks == 2 and kv.num_used_blocks == 2  # the old batch was released


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


# -- rejection ------------------------------------------------------------------------------


def test_rejection_reasons():
    kv = KVCache(4, 2)
    chunked = VLLMScheduler(kv, max_num_batched_tokens=8, max_model_len=10)
    whole = VLLMScheduler(KVCache(100, 2), max_num_batched_tokens=8,
                          enable_chunked_prefill=False)
    assert chunked.rejection_reason(req(0, 5, 3)) is None  # 8 tokens = 4 blocks
    assert "never fit" in chunked.rejection_reason(req(0, 6, 3))
    assert "max context 10" in chunked.rejection_reason(req(0, 6, 5))
    # without chunking, a prefill runs whole: the prompt, or prompt + output - 2 tokens when a
    # request preempted before its last token recomputes
    assert whole.rejection_reason(req(0, 7, 3)) is None
    reason = whole.rejection_reason(req(0, 8, 3))
    assert "a prefill of 9 tokens" in reason and "max_num_batched_tokens" in reason
    # a chunked scheduler splits the same prompt instead
    assert VLLMScheduler(KVCache(100, 2), max_num_batched_tokens=8).rejection_reason(
        req(0, 9, 3)) is None
    assert "max_num_batched_tokens" in PrefillFirstScheduler(
        KVCache(100, 2), max_num_batched_tokens=8).rejection_reason(req(0, 9, 1))


def test_rejection_counts_the_watermark():
    sched = VLLMScheduler(KVCache(10, 4, watermark=0.2))  # 8 usable blocks for admission
    assert sched.rejection_reason(req(0, 30, 2)) is None
    assert sched.rejection_reason(req(0, 30, 3)) is not None


@pytest.mark.parametrize("make", [
    lambda kv: VLLMScheduler(kv, max_num_seqs=0),
    lambda kv: VLLMScheduler(kv, max_num_batched_tokens=0),
    lambda kv: SarathiScheduler(kv, chunk_size=0),
])
def test_bad_scheduler_args_raise(make):
    from sim.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^scheduler\.\w+=0: "):
        make(KVCache(10, 4))


# -- decode stretches -----------------------------------------------------------------------


def decoding_scheduler(num_blocks=200):
    """A vLLM scheduler with four requests decoding at different offsets inside their blocks."""
    sched = VLLMScheduler(KVCache(num_blocks, 4), max_num_batched_tokens=256)
    for i, (prompt, output) in enumerate([(3, 60), (4, 45), (9, 80), (14, 60)]):
        sched.add(req(i, prompt, output))
    step(sched, 0.0)
    return sched


@pytest.mark.parametrize("k", [2, 5, 40, 44])
def test_advance_decodes_equals_stepping_one_by_one(k):
    fast, slow = decoding_scheduler(), decoding_scheduler()
    plan = fast.schedule(1.0)
    assert plan.is_pure_decode
    limit = fast.decode_stretch_limit(plan)
    assert limit == 44  # the shortest remaining output: 45 - 1
    finished_fast, blocks_used = fast.advance_decodes(plan, k, 99.0)
    expected_blocks, finished_slow = [], []
    for i in range(k):
        p = slow.schedule(float(i))
        assert decodes(p) == [0, 1, 2, 3] and p.preempted == []
        expected_blocks.append(slow.kv.num_used_blocks)  # what the step row records
        finished_slow = slow.on_step_end(p, 99.0)
    assert [int(b) for b in blocks_used] == expected_blocks
    assert [r.request_id for r in finished_fast] == [r.request_id for r in finished_slow]
    assert fast.kv.num_used_blocks == slow.kv.num_used_blocks
    for a, b in zip(sorted(fast.running + finished_fast, key=lambda r: r.request_id),
                    sorted(slow.running + finished_slow, key=lambda r: r.request_id)):
        assert (a.num_computed_tokens, a.num_generated, a.num_blocks, a.status,
                a.completion_time_s) == (b.num_computed_tokens, b.num_generated, b.num_blocks,
                                         b.status, b.completion_time_s)


def test_decode_stretch_stops_before_the_kv_pool_runs_out():
    sched = decoding_scheduler(num_blocks=12)
    plan = sched.schedule(1.0)
    limit = sched.decode_stretch_limit(plan)
    assert 1 <= limit < 44
    # stepping `limit` times never preempts; one more step would
    for i in range(limit):
        p = sched.schedule(float(i))
        assert p.preempted == [] and len(p.decodes) == 4
        sched.on_step_end(p, float(i))
    assert sched.schedule(99.0).preempted != []
