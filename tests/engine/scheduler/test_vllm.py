"""vLLM v1's scheduler on hand-built requests and a tiny KV cache, step by step: the exact plan
(who advances by how many tokens, who is preempted) and the step shape P, D, Ap, Ad."""

import numpy as np
import pytest

from sim.catalog.hardware import GPU
from sim.engine.kv_cache import KVCache
from sim.engine.request import COMPLETED, RUNNING, WAITING
from sim.engine.scheduler.vllm import VLLMScheduler
from sim.run import simulate
from tests.engine.scheduler.steps import decodes, end, prefills, req, shape, step
from tests.scenarios import RANDOM
from tests.support import compose, option


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
    plan = sched.schedule()
    assert decodes(plan) == [0]
    assert prefills(plan) == [(1, 7)]  # budget 8 - 1 decode token
    # P = 7, D = 1, Ap = 7 * (0 + 7), Ad = prompt 4 + 1 generated
    assert shape(plan) == (7, 1, 49, 5)
    assert end(sched, plan, 2.0) == []
    assert r1.num_computed_tokens == 7
    assert r1.first_token_time_s is None  # the prompt is not done yet
    assert r1.status == RUNNING and r1.num_generated == 0

    plan = sched.schedule()
    assert decodes(plan) == [0] and prefills(plan) == [(1, 3)]
    # Ap = 3 * (7 already computed + 3); Ad = 4 + 2 generated
    assert shape(plan) == (3, 1, 30, 6)
    end(sched, plan, 3.0)
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
    assert kv.num_used_blocks == 0 and kv.blocks_of(r) == ()
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
    sched = VLLMScheduler(KVCache(100, 4), max_num_batched_tokens=8, enable_chunked_prefill=False)
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
    plan = sched.schedule()
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

    plan = sched.schedule()
    # r0's decode needs a third block: r1 (admitted last) is preempted by recompute.
    assert plan.preempted == [r1]
    assert decodes(plan) == [0]
    assert prefills(plan) == []  # no admissions in a step that preempted
    assert shape(plan) == (0, 1, 0, 5)
    assert r1.status == WAITING and r1.num_computed_tokens == 0 and len(kv.blocks_of(r1)) == 0
    assert r1.num_preemptions == 1 and r1.num_generated == 1
    assert list(sched.waiting) == [r1, r2]  # the victim goes to the front
    assert sched.running == [r0]
    assert len(kv.blocks_of(r0)) == 3 and kv.num_used_blocks == 3
    end(sched, plan, 2.0)
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
    sched = VLLMScheduler(
        KVCache(100, 4),
        max_num_seqs=8,
        max_num_batched_tokens=64,
        enable_chunked_prefill=False,
        max_prefills_per_step=1,
    )
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
    sched = VLLMScheduler(
        KVCache(100, 4), max_num_seqs=8, max_num_batched_tokens=8, max_prefills_per_step=1
    )
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


@pytest.mark.parametrize(
    ("hardware", "seqs", "budget"),
    [
        ("h100_sxm", 1024, 8192),  # 79.6 GiB, not an A100: vLLM's larger defaults
        ("h200", 1024, 8192),
        ("mi300x", 1024, 8192),
        ("a100_80g", 256, 2048),  # 80 GiB, but an A100: vLLM keeps the small budget on purpose
        ("l40s", 256, 2048),  # under 70 GiB
    ],
)
def test_defaults_are_vllms_own_for_the_gpu(hardware, seqs, budget):
    gpu = GPU.from_config(option("hardware", hardware))
    sched = VLLMScheduler(KVCache(100, 16), max_model_len=131072, gpu=gpu)
    assert (sched.max_num_seqs, sched.max_num_batched_tokens) == (seqs, budget)
    # what is given stays as given
    given = VLLMScheduler(
        KVCache(100, 16), max_num_seqs=8, max_num_batched_tokens=512, max_model_len=131072, gpu=gpu
    )
    assert (given.max_num_seqs, given.max_num_batched_tokens) == (8, 512)


def test_defaulted_budget_follows_vllms_adjustments():
    h100 = GPU.from_config(option("hardware", "h100_sxm"))
    # without chunked prefill the default budget holds a whole max-length prompt
    whole = VLLMScheduler(
        KVCache(100, 16), enable_chunked_prefill=False, max_model_len=32768, gpu=h100
    )
    assert whole.max_num_batched_tokens == 32768
    # never more than max_num_seqs full-length requests, and a defaulted seq cap never above it
    short = VLLMScheduler(KVCache(100, 16), max_num_seqs=2, max_model_len=1000, gpu=h100)
    assert short.max_num_batched_tokens == 2000
    tiny = VLLMScheduler(KVCache(100, 16), max_num_batched_tokens=100, max_model_len=1000, gpu=h100)
    assert tiny.max_num_seqs == 100
    # a device vLLM cannot query gets the small defaults
    assert VLLMScheduler(KVCache(100, 16)).max_num_batched_tokens == 2048


def test_a_run_on_an_a100_keeps_steps_within_vllms_2048_token_default():
    result = simulate(compose(*RANDOM, "hardware=a100_80g", "workload.prompt_tokens=1500"))
    steps = result.steps
    tokens = np.asarray(steps.column("num_prefill_tokens")) + np.asarray(
        steps.column("num_decode_tokens")
    )
    assert tokens.max() == 2048  # 120 prompts of 1,500 tokens arriving together fill the budget
