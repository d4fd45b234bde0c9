"""What every replica scheduler shares: queues, step completion, preemption, rejection.

A scheduler owns a ``waiting`` queue (FIFO, preempted requests go back to its front) and a
``running`` list in admission order. Subclasses implement ``schedule(now) -> StepPlan`` (the
policy); everything that follows from a plan (tokens computed, tokens sampled, requests
finishing and releasing KV) lives here, once. Block accounting belongs to ``KVCache``; a
scheduler only asks it.

Preemption is by recompute, as vLLM does by default: the victim (the most recently admitted
running request) drops its KV and returns to the front of the waiting queue; when it runs again
it prefills its prompt and the output tokens it had already produced.

Decode stretches. Between arrivals a replica often runs many identical pure-decode steps. A
scheduler can promise how many (``decode_stretch_limit``), and the replica then executes them as
one event (``advance_decodes``) with results identical to stepping one by one.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from sim.errors import require
from sim.kv_cache import KVCache
from sim.request import COMPLETED, RUNNING, WAITING, Request
from sim.scheduler.plan import StepPlan
from sim.step_time.base import VECTOR_MIN_STEPS


class Scheduler:
    """Base class. ``max_num_seqs`` caps running requests, ``max_num_batched_tokens`` the
    tokens computed in one step."""

    # Whether a prompt may be split across steps; subclasses with chunking set it per instance.
    chunked_prefill = False
    # Whether running requests can be preempted (and so recomputed later).
    may_preempt = True

    def __init__(self, kv: KVCache, max_num_seqs: int = 256, max_num_batched_tokens: int = 8192,
                 max_model_len: int | None = None):
        require(max_num_seqs >= 1, "scheduler.max_num_seqs", max_num_seqs, "must be >= 1")
        require(max_num_batched_tokens >= 1, "scheduler.max_num_batched_tokens",
                max_num_batched_tokens, "must be >= 1")
        self.kv = kv
        self.max_num_seqs = int(max_num_seqs)
        self.max_num_batched_tokens = int(max_num_batched_tokens)
        self.max_model_len = max_model_len
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    # -- admission -------------------------------------------------------------------------

    def rejection_reason(self, request: Request) -> str | None:
        """Why ``request`` can never run on this replica, or None if it can."""
        total = request.prompt_tokens + request.output_tokens
        if self.max_model_len is not None and total > self.max_model_len:
            return f"{total} tokens exceed the model's max context {self.max_model_len}"
        if not self.kv.can_ever_hold(total):
            return f"{total} tokens never fit in {self.kv.capacity_tokens} KV tokens"
        if not self.chunked_prefill:
            # Without chunking a prefill runs whole: the prompt, or, for a request preempted
            # late, every token but its last (vLLM demands max_num_batched_tokens >=
            # max_model_len for the same reason).
            longest = request.prompt_tokens
            if self.may_preempt:
                longest = max(longest, request.prompt_tokens + request.output_tokens - 2)
            if longest > self.max_num_batched_tokens:
                return (f"a prefill of {longest} tokens exceeds max_num_batched_tokens "
                        f"{self.max_num_batched_tokens} without chunked prefill")
        return None

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting) or bool(self.running)

    @property
    def num_outstanding(self) -> int:
        return len(self.waiting) + len(self.running)

    # -- the policy ------------------------------------------------------------------------

    def schedule(self, now: float) -> StepPlan:
        raise NotImplementedError

    def decode_stretch_limit(self, plan: StepPlan) -> int:
        """How many steps, this one included, would repeat ``plan`` exactly if nothing arrived.

        The default (1) never fast-forwards. A policy that returns more promises that while only
        decodes advance, it would keep choosing exactly these decodes.
        """
        return 1

    # -- what follows from a plan ----------------------------------------------------------

    def preempt(self, victim: Request) -> None:
        """Drop ``victim``'s KV and send it to the front of the waiting queue (recompute)."""
        self.kv.free(victim)
        victim.num_computed_tokens = 0
        victim.num_preemptions += 1
        victim.status = WAITING
        self.waiting.appendleft(victim)

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

    def try_admit(self, request: Request, num_tokens: int) -> bool:
        """Move the head of ``waiting`` to ``running`` if the KV (above the watermark) allows."""
        if self.kv.admit(request, request.num_computed_tokens + num_tokens) is None:
            return False
        self.waiting.popleft()
        request.status = RUNNING
        self.running.append(request)
        return True

    def on_step_end(self, plan: StepPlan, now: float) -> list[Request]:
        """Apply a finished step at time ``now``; return the requests that completed."""
        finished = []
        for request, num_tokens in plan.prefills:
            request.num_computed_tokens += num_tokens
            if request.num_computed_tokens == request.prompt_tokens + request.num_generated:
                self._sample_token(request, now, finished)
        for request in plan.decodes:  # hot: _sample_token inlined (a decode has its first token)
            request.num_computed_tokens += 1
            request.num_generated += 1
            if request.num_generated == request.output_tokens:
                request.completion_time_s = now
                request.status = COMPLETED
                finished.append(request)
        if finished:
            self._retire(finished)
        return finished

    def _sample_token(self, request: Request, now: float, finished: list[Request]) -> None:
        request.num_generated += 1
        if request.first_token_time_s is None:
            request.first_token_time_s = now
        if request.num_generated == request.output_tokens:
            request.completion_time_s = now
            request.status = COMPLETED
            finished.append(request)

    def _retire(self, finished: list[Request]) -> None:
        for request in finished:
            self.kv.free(request)
        self.running = [r for r in self.running if r.status == RUNNING]

    # -- decode stretches ------------------------------------------------------------------

    def pure_decode_stretch_limit(self, decodes: list[Request]) -> int:
        """Steps the decodes can repeat before one of them completes or the KV pool runs out
        (for policies whose admission cannot change while only decodes run)."""
        max_steps = min(r.output_tokens - r.num_generated for r in decodes)
        if max_steps <= 1:
            return 1
        free = self.kv.num_free_blocks
        block = self.kv.block_size
        # Each request needs at most one new block per `block` steps: often that settles it.
        if free >= len(decodes) * ((max_steps - 1) // block + 1):
            return max_steps
        # Step `s` (1-based) needs blocks_for(computed + s) blocks per request, less what it
        # holds (the first step's blocks, at least).
        first_need = [r.num_blocks * block - r.num_computed_tokens + 1 for r in decodes]

        def blocks_needed(steps: int) -> int:
            return sum((steps - first) // block + 1 for first in first_need if first <= steps)

        lo, hi = 1, max_steps  # binary search the largest k whose new blocks fit
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if blocks_needed(mid) <= free:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def advance_decodes(self, plan: StepPlan, num_steps: int, end_time_s: float):
        """Apply ``num_steps`` repeats of the pure-decode ``plan`` at once, ending at
        ``end_time_s``.

        Returns the requests that completed (at the last step) and the KV blocks in use during
        each step, for the step rows (a numpy array for long stretches, else a list).
        """
        kv = self.kv
        block = kv.block_size
        vector = num_steps >= VECTOR_MIN_STEPS
        first_steps = []  # per request crossing a block boundary: the first step that needs one
        finished: list[Request] = []
        used_before = kv.num_used_blocks
        grown = 0
        for request in plan.decodes:
            computed = request.num_computed_tokens
            step = request.num_blocks * block - computed + 1
            request.num_computed_tokens = computed + num_steps
            if step <= num_steps:
                first_steps.append(step)
                # KVCache.grow, inlined for the hot path; the limit was checked when planning
                # and the total is checked against the pool below.
                new_blocks = (num_steps - step) // block + 1
                request.num_blocks += new_blocks
                grown += new_blocks
            generated = request.num_generated + num_steps
            request.num_generated = generated
            if generated >= request.output_tokens:
                assert generated == request.output_tokens, "stretch ran past a completion"
                request.completion_time_s = end_time_s
                request.status = COMPLETED
                finished.append(request)
        kv.num_used_blocks += grown
        # Blocks in use at each step: a request needs a new block at its first step and every
        # `block` steps after.
        if vector:
            rows = -(-num_steps // block)
            added = np.zeros(rows * block, np.int64)
            if first_steps:
                added[:num_steps] = np.bincount(np.asarray(first_steps) - 1, minlength=num_steps)
            # row r holds steps r*block .. r*block+block-1: a cumulative sum down the columns
            # repeats each first need every `block` steps
            added = added.reshape(rows, block).cumsum(axis=0).ravel()[:num_steps]
            blocks_used = used_before + np.cumsum(added)
            total = int(blocks_used[-1])
        else:
            added_at = [0] * num_steps
            for step in first_steps:
                while step <= num_steps:
                    added_at[step - 1] += 1
                    step += block
            blocks_used = []
            total = used_before
            for added in added_at:
                total += added
                blocks_used.append(total)
        assert total == kv.num_used_blocks <= kv.num_blocks, (
            f"stretch KV bookkeeping broken: {total} vs {kv.num_used_blocks} of {kv.num_blocks}")
        if finished:
            self._retire(finished)
        return finished, blocks_used
