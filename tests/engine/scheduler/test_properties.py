"""Properties every scheduler keeps, on random small workloads and tiny KV pools.

Each example draws a scheduler's settings, a KV pool small enough that requests are preempted,
and up to a dozen requests arriving at random steps. A replica's loop is played by hand: requests
that can never run are rejected (``rejection_reason``), the others are added when their step
comes, and the scheduler plans and applies steps until no work is left. Every step:

- the plan is not empty while work remains, and names no request twice;
- a request preempted in the step is not in its prefills or decodes, and is back in the waiting
  queue holding no KV;
- each planned request is running, is owed the tokens it gets, and holds KV for them;
- the step's tokens fit the token budget as the policy defines it (see ``check_budget``);
- no more than ``max_num_seqs`` requests run;
- the pool is consistent (``kv.check()``), never over capacity, and its used blocks are exactly
  the blocks the requests hold (nothing is shared here);
- the plan's ``StepShape`` agrees with its prefills and decodes.

At the end every accepted request completed exactly once, with all its output tokens.

Decode stretches: whenever ``decode_stretch_limit`` promises ``k > 1`` identical pure-decode
steps, one deep copy applies ``advance_decodes(plan, k)`` and another steps ``k`` times one by
one; both must agree on every request and on the blocks in use during each step, and each single
step must plan exactly the same decodes with no preemption. The main run then applies the stretch
as a replica does, cut short by the next arrival.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sim.engine.kv_cache import KVCache
from sim.engine.request import COMPLETED, RUNNING, WAITING, Request
from sim.engine.scheduler.base import Scheduler
from sim.engine.scheduler.plan import StepPlan
from sim.engine.scheduler.prefill_first import PrefillFirstScheduler
from sim.engine.scheduler.sarathi import SarathiScheduler
from sim.engine.scheduler.sglang import SGLangScheduler
from sim.engine.scheduler.static import StaticScheduler
from sim.engine.scheduler.trtllm import CAPACITY_POLICIES, CHUNKING_POLICIES, TRTLLMScheduler
from sim.engine.scheduler.vllm import VLLMScheduler
from tests.engine.scheduler.steps import req

# The Hypothesis profile's count (tests/conftest.py): modest in the suite, more with make test-deep
MAX_EXAMPLES = settings.default.max_examples
SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# Far above what a dozen requests of at most 90 tokens need, even preempted again and again:
# reaching it means the scheduler stopped making progress.
STEP_CAP = 20_000

KINDS = ["vllm", "sarathi", "prefill_first", "static", "trtllm", "sglang"]


# -- what an example draws --------------------------------------------------------------------


@dataclass
class Arrival:
    prompt: int
    output: int
    step: int  # the step before which it arrives


def workloads():
    arrival = st.builds(Arrival, st.integers(1, 60), st.integers(1, 30), st.integers(0, 30))
    return st.lists(arrival, min_size=1, max_size=12).map(lambda a: sorted(a, key=lambda x: x.step))


@st.composite
def schedulers(draw, kind: str, workload: list[Arrival]) -> Scheduler:
    # A tiny pool: from a bit less than the largest request (so some are rejected) to about the
    # whole workload (so that requests compete for blocks and get preempted).
    block_size = draw(st.integers(1, 8))
    totals = [a.prompt + a.output for a in workload]
    capacity = draw(st.integers(max(totals) * 3 // 4, max(totals) + sum(totals) // 2))
    kv = KVCache(
        max(1, -(-capacity // block_size)), block_size, draw(st.sampled_from([0.0, 0.0, 0.1, 0.3]))
    )
    max_num_seqs = draw(st.integers(1, 8))
    chunked = kind == "sarathi" or (kind in ("vllm", "trtllm") and draw(st.booleans()))
    # Without chunking a prefill runs whole, so budgets around the longest one (prompt +
    # output - 2 for a late recompute) let most requests in; small budgets exercise chunking.
    longest = max(max(a.prompt, a.prompt + a.output - 2) for a in workload)
    budgets = st.integers(max(1, longest * 3 // 4), longest + 10)
    if chunked:
        budgets = st.integers(1, 16) | budgets
        if kind == "trtllm":  # TRT-LLM chunks in whole KV blocks: its budget holds one
            budgets = budgets.map(lambda b: max(b, block_size))
    max_num_batched_tokens = draw(budgets)
    if kind == "vllm":
        return VLLMScheduler(
            kv,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            enable_chunked_prefill=chunked,
            max_prefills_per_step=draw(st.none() | st.integers(1, 3)),
        )
    if kind == "sarathi":
        return SarathiScheduler(
            kv,
            chunk_size=draw(st.integers(1, 64)),
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
        )
    if kind == "trtllm":
        return TRTLLMScheduler(
            kv,
            capacity_policy=draw(st.sampled_from(CAPACITY_POLICIES)),
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            enable_chunked_context=chunked,
            context_chunking_policy=draw(st.sampled_from(CHUNKING_POLICIES)),
        )
    if kind == "sglang":
        return SGLangScheduler(
            kv,
            max_running_requests=max_num_seqs,
            chunked_prefill_size=draw(st.just(-1) | st.integers(block_size, block_size + 16)),
            max_prefill_tokens=max_num_batched_tokens,
            enable_mixed_chunk=draw(st.booleans()),
            # a low, fast-decaying ratio over-admits, so decode runs out and retracts
            init_new_token_ratio=draw(st.sampled_from([0.7, 0.3, 0.05])),
            new_token_ratio_decay_steps=draw(st.sampled_from([600, 5, 1])),
            retract_decode_steps=draw(st.sampled_from([20, 0])),
            clip_max_new_tokens=draw(st.sampled_from([4096, 8])),
        )
    if kind == "prefill_first":
        return PrefillFirstScheduler(
            kv, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens
        )
    return StaticScheduler(
        kv, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens
    )


# -- checks on one plan -------------------------------------------------------------------------


def ids(requests) -> list[int]:
    return [r.request_id for r in requests]


def check_budget(sched: Scheduler, plan: StepPlan) -> None:
    """The step's tokens fit the budget, as each policy defines it."""
    p, d = plan.num_prefill_tokens, len(plan.decodes)
    budget = sched.max_num_batched_tokens
    if isinstance(sched, SarathiScheduler):
        # Decodes are never stalled, so they may exceed the budget; prefill chunks only get
        # what is left of min(chunk_size, max_num_batched_tokens) after them.
        assert p <= max(0, min(sched.chunk_size, budget) - d), (p, d)
        stalled = [r for r in sched.running if r.is_decoding and r not in plan.decodes]
        assert not stalled, f"Sarathi stalled decodes {ids(stalled)}"
    elif isinstance(sched, TRTLLMScheduler):
        # One token per generation request, contexts whole or (chunked) in whole KV blocks,
        # under max_num_tokens and max_batch_size; guaranteed_no_evict never preempts.
        assert p + d <= budget, (p, d, budget)
        assert plan.num_seqs <= sched.max_num_seqs
        for r, n in plan.prefills:
            whole = r.num_uncomputed_tokens
            assert n == whole or (sched.chunked_prefill and n % sched.kv.block_size == 0)
        if sched.no_evict:
            assert not plan.preempted
    elif isinstance(sched, SGLangScheduler):
        # A step is prefill or decode; a mixed one carries every running decode. Prompts fit
        # chunked_prefill_size (less the mixed decodes; a continuing chunk takes at least one
        # token), or without chunking max_prefill_tokens past the first prompt.
        if plan.prefills and not sched.enable_mixed_chunk:
            assert not plan.decodes
        if plan.decodes:
            assert ids(plan.decodes) == ids(r for r in sched.running if r.is_decoding)
        if sched.chunked_prefill_size is not None:
            assert p <= max(1, sched.chunked_prefill_size - d), (p, d)
        elif len(plan.prefills) > 1:
            first = plan.prefills[0][1]
            assert p - first < sched.max_prefill_tokens + sched.kv.block_size, p
    elif isinstance(sched, VLLMScheduler):
        assert p + d <= budget, (p, d, budget)
        assert len(plan.prefills) <= sched.max_prefills
        if not sched.chunked_prefill:  # prompts (and recomputes) run whole
            assert all(n == r.num_uncomputed_tokens for r, n in plan.prefills)
    else:
        # PrefillFirst and Static: a step is all prefill or all decode. Prefills fit the
        # budget; a decode step decodes every running request (Static: every batch member,
        # finished ones as padding), which max_num_seqs bounds, not the token budget.
        assert not (plan.prefills and plan.decodes)
        assert p <= budget, (p, budget)
        if isinstance(sched, StaticScheduler):
            assert all(n == r.prompt_tokens for r, n in plan.prefills)  # whole prompts
            if plan.decodes:
                assert plan.num_decode_seqs == len(sched.batch) <= sched.max_num_seqs
        elif plan.decodes:
            assert plan.decodes == sched.running
            assert d <= sched.max_num_seqs


def check_shape(sched: Scheduler, plan: StepPlan) -> None:
    """P, D, Ap, Ad of the plan agree with its prefills and decodes (before the step applies)."""
    s = plan.shape()
    assert s.num_prefill_tokens == sum(n for _, n in plan.prefills)
    assert s.prefill_attn == sum(n * (r.num_computed_tokens + n) for r, n in plan.prefills)
    num_decodes, context = len(plan.decodes), sum(r.num_computed_tokens + 1 for r in plan.decodes)
    if isinstance(sched, StaticScheduler) and plan.decodes:
        # finished batch members are computed as padding, with their whole context
        padding = [r for r in sched.batch if r.status == COMPLETED]
        num_decodes += len(padding)
        context += sum(r.num_tokens for r in padding)
    assert (s.num_decode_seqs, s.decode_context) == (num_decodes, context)


def check_plan(sched: Scheduler, plan: StepPlan, accepted: list[Request]) -> None:
    assert not plan.is_empty, "an empty plan while work remains"
    planned = [r for r, _ in plan.prefills] + plan.decodes
    assert len(set(map(id, planned))) == len(planned), f"a request twice: {ids(planned)}"
    for victim in plan.preempted:
        assert all(victim is not r for r in planned), f"preempted {victim.request_id} planned"
        assert victim.status == WAITING and victim.kv_slots == 0
        assert victim.num_computed_tokens == 0 and victim in sched.waiting
    for r, n in plan.prefills:
        assert r.status == RUNNING and r in sched.running
        assert 1 <= n <= r.num_uncomputed_tokens
        assert r.kv_slots >= r.num_computed_tokens + n, "prefill without KV for its tokens"
    for r in plan.decodes:
        assert r.status == RUNNING and r in sched.running and r.is_decoding
        assert r.kv_slots >= r.num_computed_tokens + 1, "decode without KV for its token"
    check_budget(sched, plan)
    assert len(sched.running) <= sched.max_num_seqs
    check_pool(sched, accepted)
    check_shape(sched, plan)
    if not plan.is_pure_decode:
        assert sched.decode_stretch_limit(plan) == 1


def check_pool(sched: Scheduler, accepted: list[Request]) -> None:
    kv = sched.kv
    kv.check()
    assert 0 <= kv.num_used_blocks <= kv.num_blocks
    # no prefix sharing in these schedulers: the pool is the sum of what requests hold
    assert kv.num_used_blocks == sum(r.kv_slots // kv.block_size for r in accepted)
    for r in sched.waiting:
        assert r.kv_slots == 0 and r.status == WAITING


# -- decode stretches ---------------------------------------------------------------------------


def request_states(requests: list[Request]):
    return [
        (r.request_id, r.num_computed_tokens, r.num_generated, r.status, r.kv_slots)
        for r in requests
    ]


def check_stretch(sched: Scheduler, plan: StepPlan, k: int, accepted: list[Request]):
    """``advance_decodes(plan, k)`` on one copy equals ``k`` single steps on another; return the
    blocks in use during each of the k steps."""
    fast, fast_plan, fast_requests = copy.deepcopy((sched, plan, accepted))
    slow, slow_plan, slow_requests = copy.deepcopy((sched, plan, accepted))
    fast_finished, fast_used = fast.advance_decodes(fast_plan, k)

    slow_used, slow_finished = [], []
    for i in range(k):
        if i:
            slow_plan = slow.schedule()
            assert ids(slow_plan.decodes) == ids(plan.decodes), f"step {i + 1} plans others"
            assert not slow_plan.prefills and not slow_plan.preempted, f"step {i + 1}"
            assert slow_plan.num_decode_seqs == plan.num_decode_seqs  # Static's padding too
        slow_used.append(slow.kv.num_used_blocks)  # in use while the step runs
        _, finished = slow.on_step_end(slow_plan)
        assert not finished or i == k - 1, "a request finished inside the stretch"
        slow_finished += finished

    assert [int(b) for b in fast_used] == slow_used
    assert ids(fast_finished) == ids(slow_finished)
    assert request_states(fast_requests) == request_states(slow_requests)
    assert ids(fast.running) == ids(slow.running) and ids(fast.waiting) == ids(slow.waiting)
    assert fast.kv.num_used_blocks == slow.kv.num_used_blocks
    fast.kv.check()
    return slow_used


# -- driving a scheduler as a replica does ------------------------------------------------------


def run(sched: Scheduler, workload: list[Arrival]) -> None:
    pending = list(workload)  # sorted by arrival step
    next_id = num_preempted = num_stretched = 0
    accepted: list[Request] = []
    finished_ids: list[int] = []
    step = 0
    while (pending or sched.has_work) and step < STEP_CAP:
        if not sched.has_work and pending[0].step > step:
            step = pending[0].step  # idle until the next arrival
        while pending and pending[0].step <= step:
            a = pending.pop(0)
            r = req(next_id, a.prompt, a.output, arrival=float(step))
            next_id += 1
            if sched.rejection_reason(r) is None:
                accepted.append(r)
                sched.add(r)
        if not sched.has_work:
            continue

        plan = sched.schedule()
        check_plan(sched, plan, accepted)
        num_preempted += len(plan.preempted)

        k = sched.decode_stretch_limit(plan) if plan.is_pure_decode else 1
        if k > 1:
            used = check_stretch(sched, plan, k, accepted)
            # a replica runs the stretch until the next arrival cuts it
            num_steps = min(k, pending[0].step - step) if pending else k
            num_stretched += num_steps
            finished, used_here = sched.advance_decodes(plan, num_steps)
            assert [int(b) for b in used_here] == used[:num_steps]
        else:
            num_steps = 1
            _, finished = sched.on_step_end(plan)
        for r in finished:
            assert r.status == COMPLETED and r.num_generated == r.output_tokens
        finished_ids += ids(finished)
        step += num_steps
        check_pool(sched, accepted)

    assert not pending and not sched.has_work, f"work left after {STEP_CAP} steps"
    # what the example exercised, for --hypothesis-show-statistics
    event(
        "accepted: "
        + ("none" if not accepted else "all" if len(accepted) == len(workload) else "some")
    )
    event(f"preemptions: {min(num_preempted, 5)}{'+' if num_preempted >= 5 else ''}")
    event(
        "steps in stretches: "
        + ("0" if not num_stretched else "1-31" if num_stretched < 32 else "32+")
    )
    # every accepted request completed exactly once, with all its tokens
    assert sorted(finished_ids) == sorted(ids(accepted))
    for r in accepted:
        assert r.status == COMPLETED and r.num_generated == r.output_tokens
    if isinstance(sched, StaticScheduler):
        # the last batch keeps its seats (and KV) until the next schedule() releases it
        assert sched.schedule().is_empty
    assert sched.kv.num_used_blocks == 0
    sched.kv.check()


@pytest.mark.parametrize("kind", KINDS)
@SETTINGS
@given(data=st.data(), workload=workloads())
def test_scheduler_properties(kind, data, workload):
    run(data.draw(schedulers(kind, workload), "scheduler"), workload)
