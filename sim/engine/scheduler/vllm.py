"""vLLM v1's scheduler: one token budget per step, running requests first, then waiting ones.

Each step has ``max_num_batched_tokens`` tokens to hand out. Running requests are served first,
in admission order, each with what it needs to catch up (one token for a decode, the rest of its
prompt for a request still prefilling); then waiting requests are admitted, FIFO, while budget,
``max_num_seqs`` and KV (above the watermark) allow. With chunked prefill (vLLM v1's default) a
prompt larger than the remaining budget gets a chunk of it; without, it waits for a step with
room for all of it. When a running request cannot grow its KV, the most recently admitted
running request is preempted, and no new request is admitted that step.

``max_prefills_per_step`` (default: no limit) caps how many requests get prefill tokens in one
step. At 1, prompts that arrive together are prefilled one per step, each alongside the running
decodes, instead of all in one long step. Engines that stagger context requests behave so
(vLLM's ``max_num_partial_prefills`` limits chunked prompts in the same spirit). The measured
TRT-LLM runs in data/calibration fit 2 better than no limit (benchmarks/fidelity.py).

Defaults as vLLM's own (``EngineArgs.get_batch_defaults`` and
``_set_default_max_num_seqs_and_batched_tokens_args`` in vllm-project/vllm
vllm/engine/arg_utils.py, read 2026-12-02): when ``max_num_seqs`` or
``max_num_batched_tokens`` is null, the OpenAI API server's value for the GPU, which vLLM picks
by device: on a GPU of 70 GiB or more that is not an A100, 1,024 sequences and 8,192 tokens;
on any other GPU (A100s included: "Setting large max_num_batched_tokens for A100 reduces
throughput, see PR #17885"), 256 and 2,048. Then, as vLLM does for defaulted values only:
without chunked prefill the budget is at least ``max_model_len``; it is at most
``max_num_seqs × max_model_len``; and a defaulted ``max_num_seqs`` is at most the budget.

Prefix caching is ``kv.prefix_caching=true`` (``sim.engine.prefix_cache``; a waiting request's
cached tokens count as computed when it is admitted).

Speculative decoding (``spec_decode.*``, ``sim.engine.speculation``): a decode takes 1 + K tokens
of the budget and KV for as many (vLLM's ``num_lookahead_tokens``); unlike vLLM, which trims a
request's drafts to the budget left, a decode here gets all its drafts or waits for the next
step, and running requests stop at a budget below 1 + K.

Left out: priorities, the async output processor.
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from sim.catalog.hardware import GPU
from sim.engine.kv_cache import KVCache
from sim.engine.scheduler.base import Scheduler
from sim.engine.scheduler.plan import StepPlan
from sim.errors import require

_LARGE_GPU_BYTES = 70 * 2**30  # vLLM's threshold for its larger batch defaults


def vllm_batch_defaults(
    gpu: GPU | None,
    max_num_seqs: int | None,
    max_num_batched_tokens: int | None,
    enable_chunked_prefill: bool,
    max_model_len: int | None,
) -> tuple[int, int]:
    """``(max_num_seqs, max_num_batched_tokens)`` as vLLM's API server sets them on ``gpu``
    (None: a device vLLM cannot query, which gets the small defaults), for the ones not given."""
    large = (
        gpu is not None
        and gpu.memory_bytes >= _LARGE_GPU_BYTES
        and "a100" not in (gpu.name.lower())
    )
    seqs = max_num_seqs if max_num_seqs is not None else (1024 if large else 256)
    budget = max_num_batched_tokens
    # (checked here, before a defaulted max_num_seqs is cut to it and blamed for it)
    require(
        budget is None or budget >= 1,
        "scheduler.max_num_batched_tokens",
        budget,
        "must be >= 1",
    )
    if budget is None:
        budget = 8192 if large else 2048
        if max_model_len is not None:
            if not enable_chunked_prefill:
                budget = max(max_model_len, budget)
            budget = min(seqs * max_model_len, budget)
    if max_num_seqs is None:
        seqs = min(seqs, budget)
    return seqs, budget


@mypyc_attr(allow_interpreted_subclasses=True)
class VLLMScheduler(Scheduler):
    def __init__(
        self,
        kv: KVCache,
        max_num_seqs: int | None = None,
        max_num_batched_tokens: int | None = None,
        enable_chunked_prefill: bool = True,
        max_model_len: int | None = None,
        max_prefills_per_step: int | None = None,
        gpu: GPU | None = None,
    ) -> None:
        max_num_seqs, max_num_batched_tokens = vllm_batch_defaults(
            gpu, max_num_seqs, max_num_batched_tokens, bool(enable_chunked_prefill), max_model_len
        )
        super().__init__(kv, max_num_seqs, max_num_batched_tokens, max_model_len)
        self.chunked_prefill = bool(enable_chunked_prefill)
        require(
            max_prefills_per_step is None or max_prefills_per_step >= 1,
            "scheduler.max_prefills_per_step",
            max_prefills_per_step,
            "must be >= 1 or null",
        )
        self.max_prefills = (
            max_prefills_per_step if max_prefills_per_step is not None else max_num_seqs
        )

    def schedule(self) -> StepPlan:
        plan = StepPlan()
        budget = self.max_num_batched_tokens
        chunked = self.chunked_prefill
        running = self.running
        kv = self.kv
        decodes = plan.decodes
        decode_context = 0
        # a decode computes 1 + K tokens with speculative decoding (its drafts verified), all
        # or none: a budget below that ends the step's running requests
        width = self.decode_width
        # A for loop over a list that preemption pops from the end: it stops at the new end.
        for request in running:
            if budget < width:
                break
            computed = request.num_computed_tokens
            generated = request.num_generated
            num_tokens = request.prompt_tokens + generated - computed
            if num_tokens == 1 and generated:
                # The hot path, inlined from add_decode. Most decodes have room for their next
                # token (and drafts: vLLM's lookahead slots); otherwise the cache grows the
                # request, or someone is preempted.
                if (
                    computed + width > request.kv_slots
                    and kv.grow(request, computed + width) is None
                    and not self.grow_or_preempt(request, width, plan)
                ):
                    break
                decodes.append(request)
                decode_context += computed + 1
                budget -= width
                continue
            if len(plan.prefills) >= self.max_prefills:
                continue
            if generated:
                num_tokens -= 1  # a recompute stops before the last generated token
            if num_tokens > budget:
                if not chunked:
                    continue
                num_tokens = budget
            if not self.grow_or_preempt(request, num_tokens, plan):
                break
            plan.add_prefill(request, num_tokens)
            budget -= num_tokens
        plan.num_decode_seqs = len(decodes)
        plan.decode_context = decode_context
        if plan.preempted:
            return plan
        self._admit_waiting(plan, budget)
        return plan

    def _admit_waiting(self, plan: StepPlan, budget: int) -> None:
        waiting = self.waiting
        while (
            waiting
            and budget > 0
            and len(self.running) + self.seats_kept < self.max_num_seqs
            and len(plan.prefills) < self.max_prefills
        ):
            request = waiting[0]
            num_tokens = self.admission_tokens(request)
            if num_tokens > budget:
                if not self.chunked_prefill:
                    break
                num_tokens = budget
            if not self.try_admit(request, num_tokens):
                break
            plan.add_prefill(request, num_tokens)
            budget -= num_tokens

    def decode_stretch_limit(self, plan: StepPlan) -> int:
        # Pure decode of *every* running request, no preemption: the waiting head was refused
        # for budget, seats or KV, and none of those improves until a request completes.
        if not plan.is_pure_decode or len(plan.decodes) != len(self.running):
            return 1
        return self.pure_decode_stretch_limit(plan.decodes)
