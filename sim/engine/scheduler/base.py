"""What every replica scheduler shares: queues, step completion, preemption, rejection.

A scheduler owns a ``waiting`` queue (FIFO, preempted requests go back to its front) and a
``running`` list in admission order. Subclasses implement ``schedule() -> StepPlan`` (the
policy); everything that follows from a plan (tokens computed, tokens sampled, requests
finishing and releasing KV) lives here, once. Block accounting belongs to ``KVCache``; a
scheduler only asks it. A scheduler has no clock: it reports which requests sampled their first
token and which finished (``on_step_end``), and the replica stamps the times clients see.

With a prefix cache (``kv.prefix_caching``), a waiting request's cached prompt blocks count as
computed when it is admitted (``admission_tokens``, ``try_admit``), and the blocks a step
computed are registered for others (``on_step_end``); policies change nothing else.

Preemption is by recompute, as vLLM does by default: the victim (the most recently admitted
running request) drops its KV and returns to the front of the waiting queue; when it runs again
it prefills its prompt and the output tokens it had already produced.

Decode stretches. Between arrivals a replica often runs many identical pure-decode steps. A
scheduler can promise how many (``decode_stretch_limit``), and the replica then executes them as
one event (``advance_decodes``) with results identical to stepping one by one.

Speculative decoding (``speculate``; ``sim.engine.speculation``, ``spec_decode.*``). Each decode
verifies K drafts: it computes ``decode_width`` = 1 + K tokens, so a policy grows its KV by that
many (vLLM's lookahead slots) and counts that many against its token budget; at the step's end
it advances 1 + the drafts kept, drawn from the acceptance model. As acceptance is random per
step, no step repeats another: with K > 0 every policy steps one by one (no decode stretches).
"""

from __future__ import annotations

from collections import deque
from typing import ClassVar

import numpy as np
from mypy_extensions import mypyc_attr

from sim.engine.kv_cache import KVCache
from sim.engine.request import COMPLETED, RUNNING, TRANSFERRING, WAITING, Request
from sim.engine.scheduler.plan import StepPlan
from sim.engine.speculation import DraftAcceptance
from sim.errors import require

# Why a scheduler refuses a request outright (``requests.parquet`` reject_reason,
# ``summary.json`` rejected_by_reason), checked in this order:
CONTEXT_LENGTH = "context_length"  # longer than the model's context (vLLM answers with an error)
KV_CAPACITY = "kv_capacity"  # never fits in the KV cache, even alone
PREFILL_BUDGET = "prefill_budget"  # an unchunked prefill beyond the step's token budget
REFUSALS = (CONTEXT_LENGTH, KV_CAPACITY, PREFILL_BUDGET)


# In the compiled build (setup.py), users' own schedulers may subclass this one or a built-in
# one, and copy.deepcopy works on them (the property tests copy a scheduler mid-run): mypyc
# allows both only for classes marked so, each of them (the KV caches, requests and plans too).
@mypyc_attr(allow_interpreted_subclasses=True)
class Scheduler:
    """Base class. ``max_num_seqs`` caps running requests, ``max_num_batched_tokens`` the
    tokens computed in one step."""

    # Whether a prompt may be split across steps; subclasses with chunking set it per instance.
    chunked_prefill = False
    # Whether running requests can be preempted (and so recomputed later).
    may_preempt = True
    # How the engine's prefix cache evicts (``sim.engine.prefix_cache``): "free_queue"
    # (vLLM's BlockPool), "when_full" (SGLang's radix cache), or None: not modelled, and
    # kv.prefix_caching=true is refused. Read from the class (sim.deploy.engines): a ClassVar,
    # which the compiled build keeps on the class (an annotated attribute would be per instance).
    prefix_cache_eviction: ClassVar[str | None] = "free_queue"
    # Tokens a decoding request computes in one step: 1, or 1 + K drafts verified with
    # speculative decoding (``speculate``), whose draws ``acceptance`` makes (None: none).
    decode_width = 1
    acceptance: DraftAcceptance | None = None

    def __init__(
        self,
        kv: KVCache,
        max_num_seqs: int = 256,
        max_num_batched_tokens: int = 8192,
        max_model_len: int | None = None,
    ) -> None:
        require(max_num_seqs >= 1, "scheduler.max_num_seqs", max_num_seqs, "must be >= 1")
        require(
            max_num_batched_tokens >= 1,
            "scheduler.max_num_batched_tokens",
            max_num_batched_tokens,
            "must be >= 1",
        )
        require(
            not kv.prefix_caching or self.prefix_cache_eviction is not None,
            "kv.prefix_caching",
            True,
            f"not modelled with {type(self).__name__}; use scheduler=vllm, sglang, sarathi "
            "or prefill_first",
        )
        self.kv = kv
        self.max_num_seqs = int(max_num_seqs)
        self.max_num_batched_tokens = int(max_num_batched_tokens)
        self.max_model_len = max_model_len
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        # a prefill pool's decode pool (``hand_off_to``); None: requests finish here
        self.decode_pool: Scheduler | None = None
        # a disaggregated pool's (sim.fleet.disaggregation): its KV may be held for transfers,
        # so it may have nothing to plan while requests wait; and, in a decode pool, the seats
        # kept for transfers under way, which every policy's admission counts as taken
        self.in_pool = False
        self.seats_kept = 0

    # -- admission -------------------------------------------------------------------------

    def rejection_reason(self, request: Request) -> str | None:
        """Why ``request`` can never run on this replica (one of ``REFUSALS``), or None."""
        return self.refusal(request.prompt_tokens, request.output_tokens)

    def hand_off_to(self, decode: Scheduler) -> None:
        """Make this a prefill pool's scheduler (``sim.fleet.disaggregation``): a request
        leaves once its first token is sampled, its KV held until the transfer ends, and
        ``decode`` (a decode replica's scheduler) must be able to serve the rest of it."""
        self.decode_pool = decode
        self.in_pool = True

    def join_decode_pool(self) -> None:
        """Make this a decode pool's scheduler (``sim.fleet.disaggregation``): prefilled
        requests join its batch with KV and a seat kept for them (``keep_for_transfer``), so
        it may have nothing to plan while requests wait for that KV."""
        self.in_pool = True

    def speculate(self, acceptance: DraftAcceptance) -> None:
        """Verify ``acceptance.num_draft_tokens`` drafts with every decode from now on
        (speculative decoding, before the first request arrives), kept as ``acceptance``
        draws. A request then needs KV for K tokens beyond its own (``refusal``)."""
        width = 1 + acceptance.num_draft_tokens
        require(
            self.max_num_batched_tokens >= width,
            "scheduler.max_num_batched_tokens",
            self.max_num_batched_tokens,
            f"must be >= 1 + spec_decode.num_draft_tokens ({width}): a decode verifies its"
            " drafts in one step",
        )
        self.decode_width = width
        self.acceptance = acceptance

    def refusal(self, prompt_tokens: int, output_tokens: int) -> str | None:
        """Why a request of these lengths can never run here (the first of ``REFUSALS`` that
        applies), or None if it can. A prefill pool holds the prompt and one token, and asks
        the decode pool about the whole request."""
        if self.decode_pool is not None:
            return self._refusal(prompt_tokens, 1) or self.decode_pool.refusal(
                prompt_tokens, output_tokens
            )
        return self._refusal(prompt_tokens, output_tokens)

    def _refusal(self, prompt_tokens: int, output_tokens: int) -> str | None:
        total = prompt_tokens + output_tokens
        if self.max_model_len is not None and total > self.max_model_len:
            return CONTEXT_LENGTH
        if not self.kv.can_ever_hold(total + self.decode_width - 1):  # (+ K lookahead slots)
            return KV_CAPACITY
        if not self.chunked_prefill and self._whole_prefill(prompt_tokens, total) > (
            self.max_num_batched_tokens
        ):
            return PREFILL_BUDGET
        return None

    def _whole_prefill(self, prompt_tokens: int, total: int) -> int:
        """The longest prefill a request runs in one step without chunking: its prompt, or, for
        a request preempted late, every token but its last (vLLM demands
        max_num_batched_tokens >= max_model_len for the same reason)."""
        if self.may_preempt:
            return max(prompt_tokens, total - 2)
        return prompt_tokens

    def refusal_text(self, reason: str) -> str:
        """What ``reason`` means on this replica, with its limit and what would lift it (a
        prefill pool's: on either pool, with both limits)."""
        if self.decode_pool is not None and reason != CONTEXT_LENGTH:
            return self._pools_refusal_text(reason)
        if reason == CONTEXT_LENGTH:
            return (
                f"prompt + output tokens above the model's max context"
                f" ({self.max_model_len:,} tokens)"
            )
        if reason == KV_CAPACITY:
            return (
                f"prompt + output tokens never fit in a replica's KV cache"
                f" ({self.kv.max_request_tokens:,} tokens for one request); raise fleet.tp, set"
                " precision.kv=fp8, or choose a GPU with more memory"
            )
        assert reason == PREFILL_BUDGET, f"no such refusal: {reason}"
        return (
            f"a whole prefill above scheduler.max_num_batched_tokens"
            f" ({self.max_num_batched_tokens:,}) without chunked prefill; raise it, or chunk"
        )

    def _pools_refusal_text(self, reason: str) -> str:
        decode = self.decode_pool
        assert decode is not None
        if reason == KV_CAPACITY:
            return (
                "the prompt never fits in a prefill replica's KV cache"
                f" ({self.kv.max_request_tokens:,} tokens for one request), or prompt + output"
                f" tokens in a decode replica's ({decode.kv.max_request_tokens:,}); raise"
                " placement.prefill.tp or placement.decode.tp, set precision.kv=fp8, or choose"
                " a GPU with more memory"
            )
        assert reason == PREFILL_BUDGET, f"no such refusal: {reason}"
        # only a pool that does not chunk refuses for its budget (the decode pool prefills
        # again what it preempts)
        limits = [
            f"the {name} pool's ({scheduler.max_num_batched_tokens:,}; raise it in"
            f" placement.{name}.settings)"
            for name, scheduler in (("prefill", self), ("decode", decode))
            if not scheduler.chunked_prefill
        ]
        return (
            "a whole prefill above scheduler.max_num_batched_tokens without chunked prefill: "
            + " or ".join(limits)
            + ", or chunk"
        )

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting) or bool(self.running)

    @property
    def num_outstanding(self) -> int:
        return len(self.waiting) + len(self.running)

    # -- the policy ------------------------------------------------------------------------

    def schedule(self) -> StepPlan:
        raise NotImplementedError

    def decode_stretch_limit(self, plan: StepPlan) -> int:
        """How many steps, this one included, would repeat ``plan`` exactly if nothing arrived.

        The default (1) never fast-forwards. A policy that returns more promises that while only
        decodes advance, it would keep choosing exactly these decodes. With speculative decoding
        every policy returns 1 (``pure_decode_stretch_limit``): how far a step advances each
        request is drawn at its end, so steps are taken one by one.
        """
        return 1

    # -- what follows from a plan ----------------------------------------------------------

    def preempt(self, victim: Request, front: bool = True) -> None:
        """Drop ``victim``'s KV and send it back to the waiting queue (recompute): to its front,
        as vLLM does, or (``front=False``) to its back, as SGLang's retraction does."""
        self.kv.free(victim)
        victim.num_computed_tokens = 0
        victim.num_preemptions += 1
        victim.status = WAITING
        if front:
            self.waiting.appendleft(victim)
        else:
            self.waiting.append(victim)

    def grow_or_preempt(self, request: Request, num_tokens: int, plan: StepPlan) -> bool:
        """Give ``request`` KV for ``num_tokens`` more tokens, preempting the most recently
        admitted running requests until it fits. False when ``request`` itself was the victim."""
        target = request.num_computed_tokens + num_tokens
        while self.kv.grow(request, target) is None:
            victim = self.running.pop()
            self.preempt(victim)
            plan.preempted.append(victim)
            if victim is request:
                return False
        return True

    def admission_tokens(self, request: Request) -> int:
        """Tokens the waiting ``request`` computes if admitted now: those not computed, less
        the prompt tokens a prefix cache holds (vLLM's ``get_computed_blocks``)."""
        if self.kv.prefix_caching:
            return request.num_uncomputed_tokens - self.kv.cached_tokens(request)
        return request.num_uncomputed_tokens

    def try_admit(self, request: Request, num_tokens: int) -> bool:
        """Move the head of ``waiting`` to ``running`` if the KV (above the watermark) allows,
        with ``num_tokens`` to compute (after its cached prefix, with a prefix cache)."""
        cached = self.kv.admit_cached(request, num_tokens)
        if cached is None:
            return False
        if cached:
            request.num_computed_tokens += cached
            if not request.num_preemptions:
                request.cached_prompt_tokens = cached
                request.host_cached_prompt_tokens = self.kv.last_loaded_tokens
        self.waiting.popleft()
        request.status = RUNNING
        self.running.append(request)
        return True

    def on_step_end(self, plan: StepPlan) -> tuple[list[Request], list[Request]]:
        """Apply a finished step: the requests that sampled their first output token in it (in
        the plan's order), and the requests that completed."""
        first_tokens: list[Request] = []
        finished: list[Request] = []
        caching = self.kv.prefix_caching
        for request, num_tokens in plan.prefills:
            request.num_computed_tokens += num_tokens
            if caching:
                self.kv.cache_computed(request)
            if request.num_computed_tokens == request.prompt_tokens + request.num_generated:
                # a prefill that reaches the last known token samples the next one: always the
                # first (a recompute stops one token short and decodes the rest)
                request.num_generated += 1
                assert request.num_generated == 1, "a prefill sampled a token after the first"
                first_tokens.append(request)
                if request.num_generated == request.output_tokens:
                    request.status = COMPLETED
                    finished.append(request)
                elif self.decode_pool is not None:  # its KV goes to a decode replica
                    request.status = TRANSFERRING
                    finished.append(request)
        if self.acceptance is not None:  # each decode keeps 1 + its drafts kept
            plan.num_decode_tokens = self.acceptance.advance(plan.decodes, finished)
        else:
            for request in plan.decodes:  # hot
                request.num_computed_tokens += 1
                request.num_generated += 1
                if request.num_generated == request.output_tokens:
                    request.status = COMPLETED
                    finished.append(request)
            plan.num_decode_tokens = len(plan.decodes)
        if finished:
            self._retire(finished)
        return first_tokens, finished

    def _retire(self, finished: list[Request]) -> None:
        for request in finished:
            if request.status is not TRANSFERRING:  # (its KV is held until the transfer ends)
                self.kv.free(request)
        self.running = [r for r in self.running if r.status == RUNNING]

    def has_free_seat(self) -> bool:
        """Whether a request could join the running batch now: fewer running than
        ``max_num_seqs``, the seats kept for transfers under way counted as taken."""
        return len(self.running) + self.seats_kept < self.max_num_seqs

    def keep_for_transfer(
        self, keeper: Request, request: Request, unapplied_blocks: int = 0
    ) -> bool:
        """A decode pool's scheduler keeps a seat and KV room (``keep_room``) for a prefilled
        ``request`` whose KV is still to arrive, if it has both now; the seat is taken back
        when the request joins (``admit_transferred``)."""
        if not self.has_free_seat() or not self.keep_room(keeper, request, unapplied_blocks):
            return False
        self.seats_kept += 1
        return True

    def keep_room(self, keeper: Request, request: Request, unapplied_blocks: int = 0) -> bool:
        """A decode pool's scheduler keeps KV room for a prefilled ``request`` under ``keeper``
        (a stand-in holding the blocks until the KV arrives), if it has it now: room for its
        prompt above the watermark (it grows from there as it decodes). ``unapplied_blocks``:
        blocks a decode stretch in flight holds that the pool does not count yet. Requests
        it preempted, waiting, get room first: a transfer finds none while they wait."""
        if self.waiting:
            return False
        kv = self.kv
        free = kv.num_free_blocks - unapplied_blocks - kv.watermark_blocks
        if kv.blocks_for(request.prompt_tokens) > free:
            return False
        return kv.grow(keeper, request.prompt_tokens) is not None

    def admit_transferred(self, request: Request) -> None:
        """A decode pool's scheduler takes a prefilled ``request`` whose KV has arrived: it
        holds its blocks already, and joins the running batch (its seat was kept for it,
        ``sim.fleet.disaggregation``)."""
        self.seats_kept -= 1
        assert len(self.running) + self.seats_kept < self.max_num_seqs, "a transfer's seat taken"
        request.status = RUNNING
        self.running.append(request)

    # -- decode stretches ------------------------------------------------------------------

    def decode_blocks_needed(self, decodes: list[Request]) -> int:
        """New KV blocks ``decodes`` need for their next step: for one token each, or 1 + K
        with speculative decoding (its drafts' lookahead slots)."""
        kv, width = self.kv, self.decode_width
        if width == 1:
            return sum(1 for r in decodes if r.num_computed_tokens >= r.kv_slots)
        block = kv.block_size
        return sum(
            max(0, kv.blocks_for(r.num_computed_tokens + width) - r.kv_slots // block)
            for r in decodes
        )

    def pure_decode_stretch_limit(self, decodes: list[Request]) -> int:
        """Steps the decodes can repeat before one of them completes or the KV pool runs out
        (for policies whose admission cannot change while only decodes run). With speculative
        decoding, 1: each step's acceptance is drawn anew."""
        if self.acceptance is not None:
            return 1
        max_steps = min(r.output_tokens - r.num_generated for r in decodes)
        if max_steps <= 1:
            return 1
        return self.kv.decode_steps_that_fit(decodes, max_steps)

    def advance_decodes(
        self, plan: StepPlan, num_steps: int
    ) -> tuple[list[Request], list[int] | np.ndarray]:
        """Apply ``num_steps`` repeats of the pure-decode ``plan`` at once.

        Returns the requests that completed (at the last step) and the KV blocks in use during
        each step, for the step rows.
        """
        blocks_used = self.kv.grow_decodes(plan.decodes, num_steps)
        finished: list[Request] = []
        for request in plan.decodes:
            request.num_computed_tokens += num_steps
            generated = request.num_generated + num_steps
            request.num_generated = generated
            if generated >= request.output_tokens:
                assert generated == request.output_tokens, "stretch ran past a completion"
                request.status = COMPLETED
                finished.append(request)
        if finished:
            self._retire(finished)
        return finished, blocks_used
