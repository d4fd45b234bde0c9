"""SGLang's scheduler: a step is a prefill ("extend") batch when one can be formed, else a decode.

Read from sgl-project/sglang at commit 00550cd1 (schedule_policy.py, PrefillAdder) and 0003215c
(managers/scheduler.py: get_next_batch_to_run, _get_new_batch_prefill_raw,
update_running_batch), with scheduler_components/new_token_ratio_tracker.py, environ.py and
server_args.py (_handle_gpu_memory_settings) for the defaults (read 2026-12-02).

Prefill first. Each step SGLang first tries to form a prefill batch; only when none can be formed
does it run a decode step of every running request. By default the two never mix
(``enable_mixed_chunk=False``): while prompts are prefilled, decodes wait.

Admission (``PrefillAdder``). Waiting requests are taken FIFO. A request is admitted only if the
KV pool can hold its uncomputed tokens plus *all* its future output, on top of a conservative
reservation for the requests already running::

    reserved = sum over running r of  min(max_new_tokens_r - generated_r, clip) * new_token_ratio
    admit if  extend + min(max_new_tokens - generated, clip) + page  <  free - reserved

after which ``reserved`` grows by the admitted request's paged tokens, its whole
``min(max_new_tokens, clip)`` and a page. A refused request ("no token") stops admission and
marks the batch full: no prefill is tried again until the running batch shrinks (a request
finishes or is retracted), which is why SGLang's TTFT under load is a queue behind whole
requests, not behind a token budget. ``max_running_requests`` caps running requests the same way.
Here ``max_new_tokens`` is the request's output length: the benchmark harnesses (vllm bench
serve, SGLang's bench_serving) send ``max_tokens`` equal to the output length they want and
ignore EOS, so the engine's bound and the simulator's known length coincide.

``new_token_ratio`` starts at ``init = min(0.7 x schedule_conservativeness, 1)``, falls by
``(init - 0.14 x init) / 600`` per decode step down to ``0.14 x init``, jumps after a retraction
to ``min(1, (generated + 20 x n) / (sum max_new_tokens + 1))`` over the n requests that stay,
and returns to ``init`` whenever the engine has nothing to run.

Chunked prefill. A step's prefill tokens stop at ``chunked_prefill_size`` (null: SGLang's
default for the run's GPU, ``default_chunked_prefill_size``: 8192 on 60-160 GiB GPUs such as
H100 and H200, 16384 above, 4096 or 2048 below); a prompt that does not fit whole
is cut at a page boundary and becomes the one "chunked request", which continues first in the
following steps (always a prefill step, so decodes wait for the whole prompt). Without chunking
(``chunked_prefill_size=-1``, SGLang's own way to turn it off) a step's prompts stop at
``max_prefill_tokens`` (16384), except that the first is always taken whole.

Retraction. When a decode step cannot get a new KV slot for every running request, SGLang
retracts requests (drops their KV and queues them again at the back) until the others fit,
always at least one and never the last: fewest output tokens first, then longest prompt. A
retracted request is recomputed as vLLM's preemption is (``sim.engine.request``).

Pages are the KV cache's blocks: SGLang's default page is 1 token, so ``kv.block_size=1``
reproduces it exactly; larger blocks round as SGLang's paged allocator does.

The radix prefix cache is ``kv.prefix_caching=true`` (``sim.engine.prefix_cache``: whole blocks,
LRU, as vLLM's; SGLang's radix tree matches at page granularity, which ``kv.block_size=1``
gives). Left out: overlap scheduling (SGLang's default runs the CPU scheduling of step n+1
during step n; here a step's decisions see the previous step's results), priorities and other
schedule policies than FCFS, the ``ignore_eos`` admission path used only with the radix cache
disabled, dynamic chunk sizes, the prefill delayer and DP attention. With ``spec_decode.*`` a
decode needs 1 + K tokens (its drafts): in the memory check, retraction and a mixed chunk.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from mypy_extensions import mypyc_attr

from sim.catalog.hardware import GPU
from sim.engine.kv_cache import KVCache
from sim.engine.request import Request
from sim.engine.scheduler.base import CONTEXT_LENGTH, KV_CAPACITY, Scheduler
from sim.engine.scheduler.plan import StepPlan
from sim.errors import require

# A default max_running_requests when the model's context is unknown: SGLang's request pool is
# clamp(kv_tokens / context * 512, 2048, 4096) requests (model_runner._resolve_max_num_reqs).
_REQUEST_POOL_MIN, _REQUEST_POOL_MAX = 2048, 4096


NO_CHUNKING = -1  # SGLang's --chunked-prefill-size -1


def default_chunked_prefill_size(gpu: GPU | None) -> int:
    """SGLang's ``chunked_prefill_size`` for ``gpu`` (server_args.py
    ``_handle_gpu_memory_settings``, by the memory torch reports, in GiB): 2048 below 35, 4096
    below 60 (A100-40GB, L40S), 8192 below 160 (H100, A100-80GB, H200), 16384 above (B200,
    MI300X); 4096 when the GPU is unknown."""
    if gpu is None:
        return 4096
    gib = gpu.memory_bytes / 2**30
    if gib < 35:
        return 2048
    if gib < 60:
        return 4096
    if gib < 160:
        return 8192
    return 16384


@mypyc_attr(allow_interpreted_subclasses=True)
class SGLangScheduler(Scheduler):
    # the radix cache evicts only when it needs room
    prefix_cache_eviction: ClassVar[str | None] = "when_full"

    def __init__(
        self,
        kv: KVCache,
        max_running_requests: int | None = None,
        chunked_prefill_size: int | None = None,
        max_prefill_tokens: int = 16384,
        enable_mixed_chunk: bool = False,
        schedule_conservativeness: float = 1.0,
        init_new_token_ratio: float = 0.7,
        min_new_token_ratio_factor: float = 0.14,
        new_token_ratio_decay_steps: int = 600,
        retract_decode_steps: int = 20,
        clip_max_new_tokens: int = 4096,
        max_model_len: int | None = None,
        gpu: GPU | None = None,
    ) -> None:
        if chunked_prefill_size is None:
            chunked_prefill_size = default_chunked_prefill_size(gpu)
        if chunked_prefill_size == NO_CHUNKING:
            chunked_prefill_size = None
        if max_running_requests is None:
            max_running_requests = default_max_running_requests(kv, max_model_len)
        require(
            max_running_requests >= 1,
            "scheduler.max_running_requests",
            max_running_requests,
            "must be >= 1 or null",
        )
        require(
            max_prefill_tokens >= 1,
            "scheduler.max_prefill_tokens",
            max_prefill_tokens,
            "must be >= 1",
        )
        require(
            chunked_prefill_size is None or chunked_prefill_size >= kv.block_size,
            "scheduler.chunked_prefill_size",
            chunked_prefill_size,
            f"must be -1 (no chunking), null (SGLang's default for the GPU) or at least"
            f" kv.block_size ({kv.block_size}): SGLang cuts chunks at page boundaries",
        )
        require(
            schedule_conservativeness > 0,
            "scheduler.schedule_conservativeness",
            schedule_conservativeness,
            "must be > 0",
        )
        require(
            0 < init_new_token_ratio <= 1,
            "scheduler.init_new_token_ratio",
            init_new_token_ratio,
            "must be in (0, 1]",
        )
        require(
            0 <= min_new_token_ratio_factor <= 1,
            "scheduler.min_new_token_ratio_factor",
            min_new_token_ratio_factor,
            "must be in [0, 1]",
        )
        require(
            new_token_ratio_decay_steps >= 1,
            "scheduler.new_token_ratio_decay_steps",
            new_token_ratio_decay_steps,
            "must be >= 1",
        )
        require(
            retract_decode_steps >= 0,
            "scheduler.retract_decode_steps",
            retract_decode_steps,
            "must be >= 0",
        )
        require(
            clip_max_new_tokens >= 1,
            "scheduler.clip_max_new_tokens",
            clip_max_new_tokens,
            "must be >= 1",
        )
        super().__init__(kv, max_running_requests, max_prefill_tokens, max_model_len)
        self.max_running_requests = int(max_running_requests)
        self.chunked_prefill_size = chunked_prefill_size
        self.chunked_prefill = chunked_prefill_size is not None
        self.max_prefill_tokens = int(max_prefill_tokens)
        self.enable_mixed_chunk = bool(enable_mixed_chunk)
        self.retract_decode_steps = int(retract_decode_steps)
        self.clip = int(clip_max_new_tokens)
        # NewTokenRatioTracker.from_server_args
        self.init_new_token_ratio = min(init_new_token_ratio * schedule_conservativeness, 1.0)
        self.min_new_token_ratio = min(self.init_new_token_ratio * min_new_token_ratio_factor, 1.0)
        self.new_token_ratio_decay = (
            self.init_new_token_ratio - self.min_new_token_ratio
        ) / new_token_ratio_decay_steps
        self.new_token_ratio = self.init_new_token_ratio
        self.batch_is_full = False
        """SGLang's running_batch.batch_is_full: no prefill is tried until the batch shrinks."""
        self.chunked: Request | None = None
        """The request whose prompt is being prefilled chunk by chunk (in ``running``)."""
        # When the batch shrinks, SGLang clears batch_is_full: for an extend batch as it merges
        # into the running batch (before the next prefill is tried), for a decode batch only
        # when the next decode step filters its finished requests out.
        self._extend_shrank = False
        self._finished_in_decode = False

    # -- what can never run ----------------------------------------------------------------

    def _refusal(self, prompt_tokens: int, output_tokens: int) -> str | None:
        """SGLang admits a request only with room for its prompt, all its output and a page
        (``total_tokens < rem_total_tokens``), and a retracted one for every token but its
        last: a request beyond that in an empty pool would wait forever."""
        total = prompt_tokens + output_tokens
        if self.max_model_len is not None and total > self.max_model_len:
            return CONTEXT_LENGTH
        if total + self.decode_width - 1 + self.kv.block_size >= self.kv.max_request_tokens:
            return KV_CAPACITY
        return None

    # -- the policy ------------------------------------------------------------------------

    def schedule(self) -> StepPlan:
        if not self.has_work:
            return StepPlan()
        if self._extend_shrank:
            self.batch_is_full = False  # get_next_batch_to_run: the merged batch shrank
            self._extend_shrank = False
        plan = self._prefill_batch()
        if plan is None:
            plan = self._decode_batch()
            if plan is None:
                # The running batch emptied: SGLang's iteration runs nothing (and, idle, resets
                # the ratio); the next one can prefill again.
                self.batch_is_full = False
                self.new_token_ratio = self.init_new_token_ratio
                plan = self._prefill_batch()
                if plan is None:  # a pool's KV held for transfers: wait for one to end
                    assert self.in_pool, "work, yet no prefill nor decode"
                    return StepPlan()
        return plan

    def _decoding(self) -> list[Request]:
        """The running batch: every running request but the chunked one."""
        return [r for r in self.running if r is not self.chunked]

    def _prefill_batch(self) -> StepPlan | None:
        """``_get_new_batch_prefill_raw`` with ``PrefillAdder``; None when nothing is admitted."""
        chunked = self.chunked
        if chunked is None and (self.batch_is_full or not self.waiting):
            return None
        decoding = self._decoding()
        if chunked is None and len(self.running) + self.seats_kept >= self.max_running_requests:
            self.batch_is_full = True
            return None
        plan = StepPlan()
        kv, page = self.kv, self.kv.block_size
        mixed = self.enable_mixed_chunk and bool(decoding) and self._decodes_fit(decoding)
        mixed_tokens = len(decoding) * self.decode_width if mixed else 0  # the budget counts them
        free = (kv.num_free_blocks - kv.watermark_blocks) * page
        if mixed:  # their slots first, so that admissions cannot take them
            for request in decoding:
                grown = kv.grow(request, request.num_computed_tokens + self.decode_width)
                assert grown is not None, "a mixed decode lost its slot"
        budget = _Budget(
            free=free,
            reserved=mixed_tokens
            + sum(
                (
                    min(r.output_tokens - r.num_generated, self.clip) * self.new_token_ratio
                    for r in decoding
                ),
                0.0,  # a float sum from the start (the same value): mypyc types it so
            ),
            current=mixed_tokens,
            input_left=self.max_prefill_tokens - mixed_tokens,
            chunk_left=(
                None
                if self.chunked_prefill_size is None
                else self.chunked_prefill_size - mixed_tokens
            ),
            page=page,
        )
        if chunked is not None:
            self._continue_chunked(plan, budget)
        admitted = 0
        waiting = self.waiting
        while waiting:
            if len(self.running) + self.seats_kept >= self.max_running_requests:
                self.batch_is_full = True
                break
            request = waiting[0]
            extend = self.admission_tokens(request)  # after RadixAttention's hit
            max_new = min(request.output_tokens - request.num_generated, self.clip)
            if extend + max_new + page >= budget.remaining_total:
                self.batch_is_full = True  # AddReqResult.NO_TOKEN
                break
            whole = budget.chunk_left is None or budget.paged(extend) <= budget.chunk_left
            if (
                budget.chunk_left is None
                and admitted
                and budget.paged(extend) >= (budget.input_left)
            ):
                break  # max_prefill_tokens; the first prompt is always taken whole
            num_tokens = extend
            if not whole:
                assert budget.chunk_left is not None
                num_tokens = budget.chunk_left // page * page
                if num_tokens <= 0:
                    break
            free_before = self.kv.num_free_blocks
            if not self.try_admit(request, num_tokens):
                self.batch_is_full = True
                break
            # a cached prefix it now holds is no longer evictable: SGLang's rem_total_tokens
            # (available + evictable) loses it, beyond the new tokens charged below
            taken = (free_before - self.kv.num_free_blocks) * page
            budget.free -= max(0, taken - budget.paged(num_tokens))
            admitted += 1
            plan.add_prefill(request, num_tokens)
            if whole:
                budget.charge(num_tokens, min(request.output_tokens, self.clip))
            else:
                self.chunked = request
                budget.charge(num_tokens, 0)
            state = budget.state()
            if state is not None:
                if state == "no_token":
                    self.batch_is_full = True
                break
        if not plan.prefills:
            # (mixed: the decodes keep the slots taken above; the decode step takes the same)
            return None
        if mixed:
            for request in decoding:
                plan.add_decode(request)
        return plan

    def _continue_chunked(self, plan: StepPlan, budget: _Budget) -> None:
        """``add_chunked_req``: the chunked request's next chunk comes before anyone else."""
        request = self.chunked
        assert request is not None
        remaining = request.num_uncomputed_tokens
        chunk_left = budget.chunk_left if budget.chunk_left is not None else remaining
        num_tokens = min(chunk_left, int(budget.remaining_total))
        if num_tokens <= 0:
            num_tokens = chunk_left  # SGLang must add it (else its KV leaks)
        num_tokens = max(1, min(num_tokens, remaining))
        # Unlike the engine, never take more KV than the pool has: shorten the chunk to fit.
        free_tokens = self.kv.num_free_blocks * self.kv.block_size
        room = request.kv_slots - request.num_computed_tokens + free_tokens
        num_tokens = min(num_tokens, room)
        if num_tokens <= 0:
            return
        grown = self.kv.grow(request, request.num_computed_tokens + num_tokens)
        assert grown is not None, "the chunk was sized to the free blocks"
        plan.add_prefill(request, num_tokens)
        last = num_tokens == remaining
        budget.charge(num_tokens, min(request.output_tokens, self.clip) if last else 0)
        if last:
            self.chunked = None
        self._extend_shrank = not last  # merging excludes the still-chunked request

    def _decodes_fit(self, decoding: list[Request]) -> bool:
        """``check_decode_mem``: a slot for every request's next token (its drafts too)."""
        return self.decode_blocks_needed(decoding) <= self.kv.num_free_blocks

    def _decode_batch(self) -> StepPlan | None:
        """``update_running_batch``: decode every running request, retracting if KV is short."""
        if self._finished_in_decode:
            self.batch_is_full = False  # the batch shrank when its finished requests left
            self._finished_in_decode = False
        decoding = self._decoding()
        if not decoding:
            return None
        plan = StepPlan()
        if self._decodes_fit(decoding):
            self.new_token_ratio = max(
                self.new_token_ratio - self.new_token_ratio_decay, self.min_new_token_ratio
            )
        else:
            decoding = self._retract(decoding, plan)
            self.batch_is_full = False
        for request in decoding:
            grown = self.kv.grow(request, request.num_computed_tokens + self.decode_width)
            assert grown is not None, "a decode without a slot after the memory check"
            plan.add_decode(request)
        return plan

    def _retract(self, decoding: list[Request], plan: StepPlan) -> list[Request]:
        """``retract_decode``: drop requests, fewest outputs then longest prompt first, until
        the rest fit; then re-estimate ``new_token_ratio`` from those that stay."""
        keep = sorted(decoding, key=lambda r: (r.num_generated, -r.prompt_tokens), reverse=True)
        first = True
        while first or not self._decodes_fit(keep):
            if len(keep) == 1:
                break  # SGLang always keeps one request
            first = False
            self._requeue(keep.pop(), plan)
        if not self._decodes_fit(keep) and self.chunked is not None:
            # Not SGLang's: the last request can only grow if the chunked prompt lets go.
            victim, self.chunked = self.chunked, None
            self._requeue(victim, plan)
        if not self._decodes_fit(keep) and self.in_pool:  # KV kept for transfers: wait for one
            self._requeue(keep.pop(), plan)
        assert self._decodes_fit(keep), "one request alone does not fit (refusal missed it)"
        if keep:  # (none kept: only in a pool, the ratio left as it was)
            generated = sum(r.num_generated for r in keep) + self.retract_decode_steps * len(keep)
            self.new_token_ratio = min(1.0, generated / (sum(r.output_tokens for r in keep) + 1))
        kept = set(map(id, keep))
        return [r for r in decoding if id(r) in kept]  # in admission order

    def _requeue(self, victim: Request, plan: StepPlan) -> None:
        """Drop ``victim``'s KV and queue it again, at the back (SGLang's retraction)."""
        self.running.remove(victim)
        self.preempt(victim, front=False)
        plan.preempted.append(victim)

    # -- what follows from a plan ----------------------------------------------------------

    def on_step_end(self, plan: StepPlan) -> tuple[list[Request], list[Request]]:
        first_tokens, finished = super().on_step_end(plan)
        self._after_step(plan, finished)
        return first_tokens, finished

    def advance_decodes(
        self, plan: StepPlan, num_steps: int
    ) -> tuple[list[Request], list[int] | np.ndarray]:
        # steps 2..k of the stretch each decay the ratio, as their schedule() would
        for _ in range(num_steps - 1):
            if self.new_token_ratio <= self.min_new_token_ratio:
                break
            self.new_token_ratio = max(
                self.new_token_ratio - self.new_token_ratio_decay, self.min_new_token_ratio
            )
        finished, blocks_used = super().advance_decodes(plan, num_steps)
        self._after_step(plan, finished)
        return finished, blocks_used

    def _after_step(self, plan: StepPlan, finished: list[Request]) -> None:
        if finished:
            if plan.prefills:
                self._extend_shrank = True
            else:
                self._finished_in_decode = True
        if not self.has_work:
            self.new_token_ratio = self.init_new_token_ratio  # idle

    def decode_stretch_limit(self, plan: StepPlan) -> int:
        # While the batch is full (or nobody waits) no prefill is tried, so the ratio's decay
        # changes nothing until a request finishes, which ends the stretch.
        if (
            not plan.is_pure_decode
            or self.chunked is not None
            or (self.waiting and not self.batch_is_full)
            or len(plan.decodes) != len(self.running)
        ):
            return 1
        return self.pure_decode_stretch_limit(plan.decodes)


class _Budget:
    """PrefillAdder's running totals for one step, in tokens."""

    __slots__ = ("free", "reserved", "current", "input_left", "chunk_left", "page")

    def __init__(
        self,
        free: int,
        reserved: float,
        current: int,
        input_left: int,
        chunk_left: int | None,
        page: int,
    ) -> None:
        self.free, self.reserved, self.current = free, reserved, current
        self.input_left, self.chunk_left, self.page = input_left, chunk_left, page

    @property
    def remaining_total(self) -> float:
        """``rem_total_tokens``: free KV less what running and admitted requests may need."""
        return self.free - self.reserved

    def paged(self, tokens: int) -> int:
        return -(-tokens // self.page) * self.page

    def charge(self, extend: int, max_new: int) -> None:
        """``_update_prefill_budget``."""
        paged = self.paged(extend)
        self.reserved += paged + max_new + self.page
        self.current += paged + self.page
        self.input_left -= paged
        if self.chunk_left is not None:
            self.chunk_left -= paged

    def state(self) -> str | None:
        """``budget_state``: None to continue, else why admission stops."""
        if self.remaining_total <= 0 or self.free - self.current <= 0:
            return "no_token"
        if self.input_left <= 0 or (self.chunk_left is not None and self.chunk_left <= 0):
            return "other"
        return None


def default_max_running_requests(kv: KVCache, max_model_len: int | None) -> int:
    """SGLang's default: its request pool, clamp(kv_tokens / context x 512, 2048, 4096), and
    at most half the KV tokens (model_runner._resolve_max_num_reqs)."""
    tokens = kv.capacity_tokens
    pool = _REQUEST_POOL_MAX
    if max_model_len:
        pool = max(min(int(tokens / max_model_len * 512), _REQUEST_POOL_MAX), _REQUEST_POOL_MIN)
    return max(1, min(pool, tokens // 2))
