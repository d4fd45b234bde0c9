"""Sarathi-Serve: chunked prefill under a per-step token budget, decodes first, stall-free.

Every step first advances every decoding request by one token, so ongoing generations never
stall behind a long prompt (Agrawal et al., "Taming Throughput-Latency Tradeoff in LLM Inference
with Sarathi-Serve", OSDI 2024). The rest of the step's budget, ``chunk_size`` tokens, goes to
prefills in chunks: first requests already part-way through their prompt, then new ones, FIFO.
The chunk size trades TTFT (bigger chunks finish prompts sooner) against TPOT (smaller chunks
keep steps short).

With speculative decoding (``spec_decode.*``) each decode verifies its K drafts too: 1 + K tokens
of KV and of the budget, still before any prefill.

Left out: Sarathi's dynamic chunk sizing and pipeline-parallel scheduling.
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from sim.engine.kv_cache import KVCache
from sim.engine.request import RUNNING
from sim.engine.scheduler.plan import StepPlan
from sim.engine.scheduler.vllm import VLLMScheduler
from sim.errors import require


@mypyc_attr(allow_interpreted_subclasses=True)
class SarathiScheduler(VLLMScheduler):
    def __init__(
        self,
        kv: KVCache,
        chunk_size: int = 512,
        max_num_seqs: int = 256,
        max_num_batched_tokens: int = 8192,
        max_model_len: int | None = None,
    ) -> None:
        require(chunk_size >= 1, "scheduler.chunk_size", chunk_size, "must be >= 1")
        super().__init__(kv, max_num_seqs, max_num_batched_tokens, True, max_model_len)
        self.chunk_size = int(chunk_size)

    def schedule(self) -> StepPlan:
        plan = StepPlan()
        budget = min(self.chunk_size, self.max_num_batched_tokens)
        # Pass 1: every decode (stall-free), even past the budget, which then leaves nothing
        # for prefills. Iterate over a copy: preemption pops from running.
        for request in list(self.running):
            if request.status != RUNNING or not request.is_decoding:
                continue
            if not self.grow_or_preempt(request, self.decode_width, plan):
                continue
            plan.add_decode(request)
            budget -= self.decode_width  # 1, or 1 + K drafts verified
        # A preempted victim may have been decoded already this step: drop it from the plan.
        if plan.preempted:
            self._drop_preempted(plan)
            return plan
        # Pass 2: requests part-way through their prompt, in admission order.
        for request in self.running:
            if budget <= 0:
                break
            if request.is_decoding:
                continue
            num_tokens = min(request.num_uncomputed_tokens, budget)
            if not self.grow_or_preempt(request, num_tokens, plan):
                break
            plan.add_prefill(request, num_tokens)
            budget -= num_tokens
        if plan.preempted:
            self._drop_preempted(plan)
            return plan
        self._admit_waiting(plan, budget)
        return plan

    @staticmethod
    def _drop_preempted(plan: StepPlan) -> None:
        gone = {id(r) for r in plan.preempted}
        kept = [r for r in plan.decodes if id(r) not in gone]
        if len(kept) != len(plan.decodes):
            plan.decodes = kept
            plan.num_decode_seqs = len(kept)
            plan.decode_context = sum(r.num_computed_tokens + 1 for r in kept)
        if any(id(r) in gone for r, _ in plan.prefills):
            prefills = [(r, n) for r, n in plan.prefills if id(r) not in gone]
            plan.prefills, plan.num_prefill_tokens, plan.prefill_attn = [], 0, 0
            for r, n in prefills:
                plan.add_prefill(r, n)
