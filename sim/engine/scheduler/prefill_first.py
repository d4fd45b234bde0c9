"""vLLM v0's default: a step is all prefill or all decode, and prefills go first.

When a waiting request can be admitted, the step prefills waiting requests only (whole prompts,
FIFO, under ``max_num_batched_tokens``, ``max_num_seqs`` and the KV watermark), and every
running decode stalls for that step. Otherwise the step decodes every running request, and when
the KV pool runs dry the most recently admitted request is preempted (recompute). This gives
good TTFT at low load and long TPOT stalls behind long prompts, which chunked prefill fixes.

With speculative decoding (``spec_decode.*``) each decode grows its KV by 1 + K tokens (its drafts
verified too); a decode step has no token budget here, so none is counted.

Left out: v0's swap-to-host preemption mode and its delay factor.
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from sim.engine.scheduler.base import Scheduler
from sim.engine.scheduler.plan import StepPlan


@mypyc_attr(allow_interpreted_subclasses=True)
class PrefillFirstScheduler(Scheduler):
    chunked_prefill = False

    def schedule(self) -> StepPlan:
        plan = StepPlan()
        budget = self.max_num_batched_tokens
        waiting = self.waiting
        while waiting and len(self.running) + self.seats_kept < self.max_num_seqs:
            request = waiting[0]
            num_tokens = self.admission_tokens(request)
            if num_tokens > budget or not self.try_admit(request, num_tokens):
                break
            plan.add_prefill(request, num_tokens)
            budget -= num_tokens
        if plan.prefills:
            return plan
        i = 0
        while i < len(self.running):
            request = self.running[i]
            if not self.grow_or_preempt(request, self.decode_width, plan):  # (+ K drafts)
                break
            plan.add_decode(request)
            i += 1
        return plan

    def decode_stretch_limit(self, plan: StepPlan) -> int:
        # A decode step means no waiting request could be admitted; decoding only uses up KV,
        # so none can until a request completes.
        if not plan.is_pure_decode:
            return 1
        return self.pure_decode_stretch_limit(plan.decodes)
