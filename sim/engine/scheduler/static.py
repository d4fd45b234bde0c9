"""Request-level (static) batching: the baseline that shows why continuous batching matters.

A batch of up to ``max_num_seqs`` waiting requests is formed only when the previous batch has
entirely finished. Each member reserves KV for its whole prompt and output at admission (so
nothing is ever preempted), the batch prefills together in one step, then decodes until its
longest member is done. A finished member returns its response at once but keeps its seat and
is computed as padding until the batch ends, as in HF ``generate`` or FasterTransformer.

With speculative decoding (``spec_decode.*``) each decode step verifies K drafts for every
member of the batch, finished ones included (padding computes whatever the batch computes), and
a member's KV is reserved with K lookahead slots beyond its output. No batched engine of this
kind speculates (Hugging Face's assisted generation takes one sequence at a time): the pair
shows what drafts buy a batch that runs to its longest member.

Left out: padding of prompts to a common length in the prefill step.
"""

from __future__ import annotations

from typing import ClassVar

from mypy_extensions import mypyc_attr

from sim.engine.kv_cache import KVCache
from sim.engine.request import COMPLETED, RUNNING, Request
from sim.engine.scheduler.base import Scheduler
from sim.engine.scheduler.plan import StepPlan


@mypyc_attr(allow_interpreted_subclasses=True)
class StaticScheduler(Scheduler):
    chunked_prefill = False
    may_preempt = False  # KV for the whole output is reserved at admission
    prefix_cache_eviction: ClassVar[str | None] = None  # not modelled

    def __init__(
        self,
        kv: KVCache,
        max_num_seqs: int = 32,
        max_num_batched_tokens: int = 65536,
        max_model_len: int | None = None,
    ) -> None:
        super().__init__(kv, max_num_seqs, max_num_batched_tokens, max_model_len)
        self.batch: list[Request] = []  # members of the current batch, finished ones included

    def schedule(self) -> StepPlan:
        plan = StepPlan()
        if not self.running:
            self._release_batch()
            budget = self.max_num_batched_tokens
            while self.waiting and len(self.running) < self.max_num_seqs:
                request = self.waiting[0]
                # (and the drafts' lookahead slots of a verification step: decode_width - 1)
                total = request.prompt_tokens + request.output_tokens + self.decode_width - 1
                if request.prompt_tokens > budget or self.kv.admit(request, total) is None:
                    break
                self.waiting.popleft()
                request.status = RUNNING
                self.running.append(request)
                self.batch.append(request)
                plan.add_prefill(request, request.prompt_tokens)
                budget -= request.prompt_tokens
            return plan
        for request in self.batch:
            if request.status == COMPLETED:  # padding: computed, produces nothing
                plan.num_decode_seqs += 1
                plan.decode_context += request.num_tokens
            else:
                plan.add_decode(request)
        return plan

    def _release_batch(self) -> None:
        for request in self.batch:
            self.kv.free(request)
        self.batch = []

    def _retire(self, finished: list[Request]) -> None:
        # Keep the KV reserved (the seat is held) until the whole batch ends.
        self.running = [r for r in self.running if r.status == RUNNING]

    def decode_stretch_limit(self, plan: StepPlan) -> int:
        if not plan.is_pure_decode or self.acceptance is not None:
            return 1  # (with speculation, each step's acceptance is drawn anew)
        # KV was reserved for the whole output at admission: only completions end the stretch.
        return max(1, min(r.output_tokens - r.num_generated for r in plan.decodes))
