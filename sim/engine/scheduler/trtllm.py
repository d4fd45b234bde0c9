"""TensorRT-LLM's in-flight batching: a capacity scheduler, then a micro-batch scheduler.

Every iteration TensorRT-LLM runs two passes over its active requests (running ones first, in
admission order, then waiting ones, FIFO):

1. The capacity scheduler decides which requests may hold KV, by ``capacity_policy``:

   - ``guaranteed_no_evict`` (TensorRT-LLM's default): every running request keeps its place and
     reserves the KV blocks it still needs to finish, ``ceil((prompt + max_tokens) / block)``
     minus the blocks it holds. A waiting request is admitted only if its own blocks to
     completion fit in what the free blocks leave after those reservations; the first that does
     not fit stops admission. Nothing is ever evicted. (The simulator knows each request's output
     length; benchmark harnesses send it as ``max_tokens``.)
   - ``max_utilization``: only the blocks of the current iteration are counted (one token for a
     generation request, the whole prompt for a context's first chunk). When a running request
     cannot get its block, the most recently admitted running request is paused (its KV freed;
     it returns to the waiting queue's front and recomputes its prompt and the tokens it had
     produced), and no waiting request is admitted in that iteration.

   Either way at most ``max_num_seqs`` requests (TensorRT-LLM's ``max_batch_size``) fit.
2. The micro-batch scheduler takes the fitting requests in order (guaranteed_no_evict: every
   generation request, then contexts; max_utilization: their list order) and builds the step
   under ``max_num_batched_tokens`` (TensorRT-LLM's ``max_num_tokens``) and ``max_num_seqs``:
   a generation request costs one token, a context its remaining prompt. Without chunking a
   context that does not fit ends the step's list; with ``enable_chunked_context`` contexts are
   set aside, and if they do not all fit in the tokens left after the generation requests their
   chunks are cut in whole KV blocks (TensorRT-LLM's chunk unit is ``tokens_per_block``):
   ``first_come_first_served`` gives each, in order, as much as is left; ``equal_progress``
   hands out one block to each in turn until the budget is spent.

A context's KV for its whole prompt is allocated when its first chunk runs (as TensorRT-LLM's
KV manager does), and a generation request grows by a block when it needs one.

Speculative decoding (``spec_decode.*``): a generation request verifies K draft tokens, so it
costs 1 + K tokens of ``max_num_tokens`` and needs KV for as many; ``guaranteed_no_evict``
reserves the K draft slots of a request's last step with its blocks to completion.

Read against TensorRT-LLM's source (GitHub NVIDIA/TensorRT-LLM, read 2025-06):
``cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp`` @02a10fed (GuaranteedNoEvictScheduler,
MaxUtilizationScheduler), ``cpp/tensorrt_llm/batch_manager/scheduledBlocksManager.h`` @1ce9149b
and ``kvCacheManager.cpp`` (getRemainingBlocksToCompletion, getNeededBlocksOneStep),
``cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp`` @0a949d31 (the micro-batch loop and
both chunking policies), ``tensorrt_llm/_torch/pyexecutor/py_executor_creator.py`` @bab0f2e6 and
``_util.py`` (the PyTorch flow builds both from ``max_batch_size``, ``max_num_tokens``; chunk
unit = ``tokens_per_block``; FIRST_COME_FIRST_SERVED unless set), ``tensorrt_llm/llmapi/
llm_args.py`` @fcd3f316 (``capacity_scheduler_policy=GUARANTEED_NO_EVICT``,
``enable_chunked_prefill=False``) and ``tensorrt_llm/builder.py`` @008b2b8d (BuildConfig:
``max_batch_size=2048``, ``max_num_tokens=8192``, the defaults of ``trtllm-serve``).

Left out on purpose: the overlap scheduler (requests in flight skipped for one iteration, and
max_utilization's two-step look-ahead it implies), KV block reuse (prefix caching: refused with
``kv.prefix_caching=true``; use ``scheduler=vllm``) and the "beneficial to skip" delay it adds,
beam search, LoRA/PEFT pages, sliding-window attention, the
STATIC_BATCH and PREFILL_FIRST capacity policies (``static`` and ``prefill_first`` model those
ideas), and the rare reordering where a short context that fits a leftover budget starts before
an earlier, longer one that waits (here the earlier one keeps its place at the waiting queue's
head).
"""

from __future__ import annotations

from typing import ClassVar

from mypy_extensions import mypyc_attr

from sim.engine.kv_cache import KVCache
from sim.engine.request import RUNNING, WAITING, Request
from sim.engine.scheduler.base import Scheduler
from sim.engine.scheduler.plan import StepPlan
from sim.errors import require

GUARANTEED_NO_EVICT = "guaranteed_no_evict"
MAX_UTILIZATION = "max_utilization"
CAPACITY_POLICIES = (GUARANTEED_NO_EVICT, MAX_UTILIZATION)
FIRST_COME_FIRST_SERVED = "first_come_first_served"
EQUAL_PROGRESS = "equal_progress"
CHUNKING_POLICIES = (FIRST_COME_FIRST_SERVED, EQUAL_PROGRESS)


@mypyc_attr(allow_interpreted_subclasses=True)
class TRTLLMScheduler(Scheduler):
    """``max_num_seqs`` is TensorRT-LLM's ``max_batch_size``, ``max_num_batched_tokens`` its
    ``max_num_tokens`` (the names every Fleetcast scheduler shares)."""

    # KV block reuse is not modelled (module docstring)
    prefix_cache_eviction: ClassVar[str | None] = None

    def __init__(
        self,
        kv: KVCache,
        capacity_policy: str = GUARANTEED_NO_EVICT,
        max_num_seqs: int = 2048,
        max_num_batched_tokens: int = 8192,
        enable_chunked_context: bool = False,
        context_chunking_policy: str = FIRST_COME_FIRST_SERVED,
        max_model_len: int | None = None,
    ) -> None:
        super().__init__(kv, max_num_seqs, max_num_batched_tokens, max_model_len)
        require(
            capacity_policy in CAPACITY_POLICIES,
            "scheduler.capacity_policy",
            capacity_policy,
            f"must be one of {', '.join(CAPACITY_POLICIES)}",
        )
        require(
            context_chunking_policy in CHUNKING_POLICIES,
            "scheduler.context_chunking_policy",
            context_chunking_policy,
            f"must be one of {', '.join(CHUNKING_POLICIES)}",
        )
        self.chunked_prefill = bool(enable_chunked_context)
        # Chunks are cut in whole blocks: a budget below one block could never start a prompt.
        require(
            not self.chunked_prefill or self.max_num_batched_tokens >= kv.block_size,
            "scheduler.max_num_batched_tokens",
            max_num_batched_tokens,
            f"must be >= kv.block_size ({kv.block_size}) with enable_chunked_context:"
            " TensorRT-LLM chunks contexts in whole KV blocks",
        )
        self.no_evict = capacity_policy == GUARANTEED_NO_EVICT
        self.may_preempt = not self.no_evict
        self.equal_progress = context_chunking_policy == EQUAL_PROGRESS

    # -- 1. the capacity scheduler -----------------------------------------------------------

    def blocks_to_completion(self, request: Request) -> int:
        """Blocks ``request`` still needs to hold its prompt and every output token (and, with
        speculative decoding, the K draft slots its last decode needs beyond them). A prefill
        pool's request leaves with its first token (``sim.fleet.disaggregation``)."""
        kv = self.kv
        return kv.blocks_for(self._tokens_to_completion(request)) - (
            request.kv_slots // kv.block_size
        )

    def _tokens_to_completion(self, request: Request) -> int:
        output = 1 if self.decode_pool is not None else request.output_tokens
        return request.prompt_tokens + output + self.decode_width - 1

    def keep_room(self, keeper: Request, request: Request, unapplied_blocks: int = 0) -> bool:
        """guaranteed_no_evict admits only what it can carry to completion: a prefilled request
        coming to a decode pool needs room for all of it, beyond what the running requests
        will still take. (Blocks a stretch has not applied yet are both missing from the used
        ones and still counted as to come: they cancel out.)"""
        if not self.no_evict or self.waiting:
            return super().keep_room(keeper, request, unapplied_blocks)
        kv = self.kv
        available = kv.num_free_blocks - kv.watermark_blocks
        available -= sum(self.blocks_to_completion(r) for r in self.running)
        tokens = self._tokens_to_completion(request)
        if kv.blocks_for(tokens) > available:
            return False
        return kv.grow(keeper, tokens) is not None

    def _fit_no_evict(self) -> list[Request]:
        kv = self.kv
        available = kv.num_free_blocks - kv.watermark_blocks
        generating: list[Request] = []
        contexts: list[Request] = []
        for request in self.running:
            available -= self.blocks_to_completion(request)
            (generating if request.is_decoding else contexts).append(request)
        # Admission reserved every running request's blocks to completion, and each block one
        # of them takes since came out of the free ones: the reservations still hold.
        assert available >= 0, f"guaranteed_no_evict over-reserved by {-available} blocks"
        fitting = generating + contexts
        for request in self.waiting:
            needed = self.blocks_to_completion(request)
            if len(fitting) + self.seats_kept >= self.max_num_seqs or needed > available:
                break
            available -= needed
            fitting.append(request)
        return fitting

    def _fit_max_utilization(self, plan: StepPlan) -> list[Request]:
        kv = self.kv
        block = kv.block_size
        running = self.running
        fitting: list[Request] = []
        scheduled = 0  # blocks this iteration's fitting requests take
        i = 0
        while i < len(running):
            request = running[i]
            # a generation request may need a new block; a context holds its prompt already
            needed = 0
            if request.is_decoding:
                needed = (
                    kv.blocks_for(request.num_computed_tokens + self.decode_width)
                    - request.kv_slots // block
                )
            if scheduled + needed <= kv.num_free_blocks:
                scheduled += needed
                fitting.append(request)
                i += 1
                continue
            victim = running.pop()  # the last started request, perhaps this one
            self.preempt(victim)
            plan.preempted.append(victim)
        if plan.preempted:
            return fitting  # pausing ends the list at the victim: nobody new this iteration
        for request in self.waiting:
            needed = kv.blocks_for(request.num_uncomputed_tokens)  # its whole first context
            if (
                len(fitting) + self.seats_kept >= self.max_num_seqs
                or scheduled + needed > kv.num_free_blocks - kv.watermark_blocks
            ):
                break
            scheduled += needed
            fitting.append(request)
        return fitting

    # -- 2. the micro-batch scheduler --------------------------------------------------------

    def _micro_batch(self, fitting: list[Request], plan: StepPlan) -> None:
        budget = self.max_num_batched_tokens
        chunked = self.chunked_prefill
        width = self.decode_width  # a generation request's tokens: 1, or 1 + K drafts
        num_tokens = 0  # generation tokens, plus whole contexts when not chunking
        decodes: list[Request] = []
        contexts: list[Request] = []
        wanted: list[int] = []  # each context's remaining prompt
        for request in fitting:
            if request.is_decoding:
                if num_tokens + width > budget:
                    break
                decodes.append(request)
                num_tokens += width
            else:
                remaining = request.num_uncomputed_tokens
                if not chunked:
                    if num_tokens + remaining > budget:
                        break
                    num_tokens += remaining
                contexts.append(request)
                wanted.append(remaining)
            if len(decodes) + len(contexts) >= self.max_num_seqs:
                break
        sizes = wanted
        if chunked and sum(wanted) > budget - num_tokens:
            sizes = self.chunk_sizes(wanted, budget - num_tokens)
        kv = self.kv
        for request, size in zip(contexts, sizes, strict=True):
            if not size:
                continue
            if request.status == WAITING:  # a first chunk: KV for the whole context now
                allocated = kv.admit(request, request.num_uncomputed_tokens)
                assert allocated is not None, "the capacity scheduler admitted beyond the pool"
                self._start(request)
            plan.add_prefill(request, size)
        for request in decodes:
            grown = kv.grow(request, request.num_computed_tokens + width)
            assert grown is not None, "the capacity scheduler let a decode outgrow the pool"
            plan.add_decode(request)

    def _start(self, request: Request) -> None:
        waiting = self.waiting
        if waiting[0] is request:
            waiting.popleft()
        else:  # an earlier context got no chunk this step (see chunk_sizes)
            waiting.remove(request)
        request.status = RUNNING
        self.running.append(request)

    def chunk_sizes(self, wanted: list[int], capacity: int) -> list[int]:
        """Tokens each context gets when ``wanted`` (their remaining prompts, in order) do not
        all fit in ``capacity``: whole remainders or whole KV blocks, by the chunking policy."""
        unit = self.kv.block_size
        if not self.equal_progress:  # first come, first served
            sizes = []
            for remaining in wanted:
                size = min(remaining, capacity)
                if size != remaining:
                    size = size // unit * unit
                sizes.append(size)
                capacity -= size
            return sizes
        sizes = [0] * len(wanted)
        used, progressed = 0, True
        while used < capacity and progressed:
            progressed = False
            for i, remaining in enumerate(wanted):
                step = min(sizes[i] + unit, remaining) - sizes[i]
                if step and used + step <= capacity:
                    sizes[i] += step
                    used += step
                    progressed = True
        return sizes

    # -- the policy --------------------------------------------------------------------------

    def schedule(self) -> StepPlan:
        plan = StepPlan()
        fitting = self._fit_no_evict() if self.no_evict else self._fit_max_utilization(plan)
        self._micro_batch(fitting, plan)
        return plan

    def decode_stretch_limit(self, plan: StepPlan) -> int:
        # Pure decode of every running request. The waiting head was held back by seats,
        # tokens or KV, and none of those improves until a request completes: decoding leaves
        # the seats and tokens as they are, and under guaranteed_no_evict the free blocks and
        # the reservations shrink together; under max_utilization the free blocks less this
        # step's new ones never grow. pure_decode_stretch_limit stops before KV runs out.
        if not plan.is_pure_decode or len(plan.decodes) != len(self.running):
            return 1
        return self.pure_decode_stretch_limit(plan.decodes)
