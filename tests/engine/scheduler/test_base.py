"""What every scheduler shares: rejection reasons, argument checks, and decode stretches applied
at once equal to stepping one by one."""

import pytest

from sim.engine.kv_cache import KVCache
from sim.engine.scheduler.base import CONTEXT_LENGTH, KV_CAPACITY, PREFILL_BUDGET
from sim.engine.scheduler.prefill_first import PrefillFirstScheduler
from sim.engine.scheduler.sarathi import SarathiScheduler
from sim.engine.scheduler.vllm import VLLMScheduler
from tests.engine.scheduler.steps import decodes, end, req, step


def test_rejection_reasons():
    kv = KVCache(4, 2)
    chunked = VLLMScheduler(kv, max_num_batched_tokens=8, max_model_len=10)
    whole = VLLMScheduler(KVCache(100, 2), max_num_batched_tokens=8, enable_chunked_prefill=False)
    assert chunked.rejection_reason(req(0, 5, 3)) is None  # 8 tokens = 4 blocks
    assert chunked.rejection_reason(req(0, 6, 3)) == KV_CAPACITY  # 9 tokens = 5 blocks
    assert chunked.rejection_reason(req(0, 6, 5)) == CONTEXT_LENGTH  # 11 > 10, checked first
    assert "(10 tokens)" in chunked.refusal_text(CONTEXT_LENGTH)
    assert "(8 tokens for one request)" in chunked.refusal_text(KV_CAPACITY)
    # without chunking, a prefill runs whole: the prompt, or prompt + output - 2 tokens when a
    # request preempted before its last token recomputes
    assert whole.rejection_reason(req(0, 7, 3)) is None
    assert whole.rejection_reason(req(0, 8, 3)) == PREFILL_BUDGET  # a prefill of 9 tokens
    assert "max_num_batched_tokens (8)" in whole.refusal_text(PREFILL_BUDGET)
    # a chunked scheduler splits the same prompt instead
    assert (
        VLLMScheduler(KVCache(100, 2), max_num_batched_tokens=8).rejection_reason(req(0, 9, 3))
        is None
    )
    # a scheduler that never chunks refuses the prompt itself
    assert (
        PrefillFirstScheduler(KVCache(100, 2), max_num_batched_tokens=8).rejection_reason(
            req(0, 9, 1)
        )
        == PREFILL_BUDGET
    )


def test_rejection_counts_the_watermark():
    sched = VLLMScheduler(KVCache(10, 4, watermark=0.2))  # 8 usable blocks for admission
    assert sched.rejection_reason(req(0, 30, 2)) is None
    assert sched.rejection_reason(req(0, 30, 3)) is not None


@pytest.mark.parametrize(
    "make",
    [
        lambda kv: VLLMScheduler(kv, max_num_seqs=0),
        lambda kv: VLLMScheduler(kv, max_num_batched_tokens=0),
        lambda kv: SarathiScheduler(kv, chunk_size=0),
    ],
)
def test_bad_scheduler_args_raise(make):
    from sim.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^scheduler\.\w+=0: "):
        make(KVCache(10, 4))


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
    plan = fast.schedule()
    assert plan.is_pure_decode
    limit = fast.decode_stretch_limit(plan)
    assert limit == 44  # the shortest remaining output: 45 - 1
    finished_fast, blocks_used = fast.advance_decodes(plan, k)
    expected_blocks, finished_slow = [], []
    for _ in range(k):
        p = slow.schedule()
        assert decodes(p) == [0, 1, 2, 3] and p.preempted == []
        expected_blocks.append(slow.kv.num_used_blocks)  # what the step row records
        finished_slow = end(slow, p, 99.0)
    assert [int(b) for b in blocks_used] == expected_blocks
    assert [r.request_id for r in finished_fast] == [r.request_id for r in finished_slow]
    assert fast.kv.num_used_blocks == slow.kv.num_used_blocks
    for a, b in zip(
        sorted(fast.running + finished_fast, key=lambda r: r.request_id),
        sorted(slow.running + finished_slow, key=lambda r: r.request_id),
        strict=True,
    ):
        # block ids may be handed out in another order; how many each holds may not differ
        assert (a.num_computed_tokens, a.num_generated, len(fast.kv.blocks_of(a)), a.status) == (
            b.num_computed_tokens,
            b.num_generated,
            len(slow.kv.blocks_of(b)),
            b.status,
        )


def test_decode_stretch_stops_before_the_kv_pool_runs_out():
    sched = decoding_scheduler(num_blocks=12)
    plan = sched.schedule()
    limit = sched.decode_stretch_limit(plan)
    assert 1 <= limit < 44
    # stepping `limit` times never preempts; one more step would
    for i in range(limit):
        p = sched.schedule()
        assert p.preempted == [] and len(p.decodes) == 4
        end(sched, p, float(i))
    assert sched.schedule().preempted != []


def _keeper(request):
    """The stand-in that holds a transfer's blocks until its KV arrives."""
    return req(-1, request.prompt_tokens, 1)


def test_a_decode_pool_keeps_a_seat_and_room_for_a_transfer_or_neither():
    sched = VLLMScheduler(KVCache(10, 4), max_num_seqs=2)  # 10 blocks of 4 tokens, 2 seats
    sched.join_decode_pool()
    assert sched.in_pool and sched.has_free_seat()
    first, second, third = (req(i, 8, 4) for i in range(3))  # 2 blocks each
    assert sched.keep_for_transfer(_keeper(first), first)
    assert sched.keep_for_transfer(_keeper(second), second)
    assert sched.seats_kept == 2 and sched.kv.num_used_blocks == 4
    # no seat left: nothing is kept, not even the blocks
    assert not sched.has_free_seat()
    assert not sched.keep_for_transfer(_keeper(third), third)
    assert sched.seats_kept == 2 and sched.kv.num_used_blocks == 4
    # a kept seat is taken back when its request joins: it counts as running instead
    sched.kv.grow(first, first.prompt_tokens)
    sched.admit_transferred(first)
    assert sched.seats_kept == 1 and sched.running == [first] and not sched.has_free_seat()


def test_a_seat_without_room_is_not_kept():
    sched = VLLMScheduler(KVCache(10, 4), max_num_seqs=4)
    sched.join_decode_pool()
    big = req(0, 44, 4)  # 11 blocks: more than the pool
    assert not sched.keep_for_transfer(_keeper(big), big)
    assert sched.seats_kept == 0 and sched.kv.num_used_blocks == 0 and sched.has_free_seat()
