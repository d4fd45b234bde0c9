"""The paged KV cache of one replica: a pool of fixed-size blocks, allocated on demand.

A request holding ``t`` tokens of KV needs ``ceil(t / block_size)`` blocks (vLLM's paged
attention). Blocks are only counted, never addressed: Fleetcast does not model fragmentation
inside a block beyond the rounding up, nor prefix sharing between requests.

The cache allocates and frees; it never decides who runs. "Not enough blocks right now" is an
expected shortage and answers ``None``; the scheduler decides whether to wait or to preempt.
The watermark (a fraction of all blocks) is kept free when *admitting* new requests, so running
requests have room to grow before anyone must be preempted (vLLM's ``watermark``).

Decode stretches (see ``sim.replica``) grow many requests by one token per step for ``k``
steps at once. A request holding ``b`` blocks with ``c`` tokens computed first needs a new block
at step ``b·block_size − c + 1`` of the stretch, then every ``block_size`` steps; the two
``decode_*`` methods do that arithmetic for the whole batch.
"""

from __future__ import annotations

import math

import numpy as np

from sim.errors import require
from sim.request import Request
from sim.vectorize import VECTOR_MIN_STEPS


class KVCache:
    """Block accounting for one replica."""

    __slots__ = ("num_blocks", "block_size", "watermark_blocks", "num_used_blocks")

    def __init__(self, num_blocks: int, block_size: int, watermark: float = 0.0):
        require(num_blocks >= 1, "kv.num_blocks", num_blocks, "must be >= 1")
        require(block_size >= 1, "kv.block_size", block_size, "must be >= 1")
        require(0.0 <= watermark < 1.0, "kv.watermark", watermark, "must be in [0, 1)")
        self.num_blocks = int(num_blocks)
        self.block_size = int(block_size)
        self.watermark_blocks = int(math.ceil(watermark * num_blocks))
        self.num_used_blocks = 0

    @property
    def num_free_blocks(self) -> int:
        return self.num_blocks - self.num_used_blocks

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks needed to hold ``num_tokens`` tokens of KV."""
        return -(-num_tokens // self.block_size)

    def grow(self, request: Request, num_tokens: int) -> int | None:
        """Make ``request`` hold KV for ``num_tokens`` tokens; return the blocks added, or None.

        None means the pool has too few free blocks now; nothing changes then.
        """
        needed = -(-num_tokens // self.block_size) - request.num_blocks
        if needed <= 0:
            return 0
        if needed > self.num_blocks - self.num_used_blocks:
            return None
        request.num_blocks += needed
        request.kv_slots = request.num_blocks * self.block_size
        self.num_used_blocks += needed
        return needed

    def admit(self, request: Request, num_tokens: int) -> int | None:
        """Like ``grow`` for a request not yet running: also keeps the watermark free."""
        needed = -(-num_tokens // self.block_size) - request.num_blocks
        if needed > self.num_blocks - self.num_used_blocks - self.watermark_blocks:
            return None
        return self.grow(request, num_tokens)

    def can_ever_hold(self, num_tokens: int) -> bool:
        """Whether a request of ``num_tokens`` tokens fits even in an otherwise empty pool."""
        return self.blocks_for(num_tokens) <= self.num_blocks - self.watermark_blocks

    def free(self, request: Request) -> None:
        """Release every block of ``request``."""
        self.num_used_blocks -= request.num_blocks
        request.num_blocks = 0
        request.kv_slots = 0
        assert self.num_used_blocks >= 0, f"KV pool went negative ({self.num_used_blocks} blocks)"

    def decode_steps_that_fit(self, decodes: list[Request], max_steps: int) -> int:
        """The most steps (1 to ``max_steps``) every request in ``decodes`` can advance one
        token per step before the pool runs out (the first step's blocks are already held)."""
        free = self.num_blocks - self.num_used_blocks
        block = self.block_size
        # Each request needs at most one new block per `block` steps: often that settles it.
        if free >= len(decodes) * ((max_steps - 1) // block + 1):
            return max_steps
        first_need = [r.kv_slots - r.num_computed_tokens + 1 for r in decodes]

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

    def grow_decodes(self, decodes: list[Request], num_steps: int):
        """Grow every request in ``decodes`` by ``num_steps`` tokens (before the scheduler
        counts them computed); return the blocks in use during each of those steps (a numpy
        array for long stretches, else a list). The caller checked the fit with
        ``decode_steps_that_fit``."""
        block = self.block_size
        used_before = self.num_used_blocks
        first_steps = []  # per request that crosses a block boundary: the first step needing one
        grown = 0
        for request in decodes:
            step = request.kv_slots - request.num_computed_tokens + 1
            if step <= num_steps:
                first_steps.append(step)
                new_blocks = (num_steps - step) // block + 1
                request.num_blocks += new_blocks
                request.kv_slots += new_blocks * block
                grown += new_blocks
        self.num_used_blocks += grown
        assert self.num_used_blocks <= self.num_blocks, (
            f"decode stretch outgrew the KV pool ({self.num_used_blocks} > {self.num_blocks})")
        if num_steps >= VECTOR_MIN_STEPS:
            rows = -(-num_steps // block)
            added = np.zeros(rows * block, np.int64)
            if first_steps:
                added[:num_steps] = np.bincount(np.asarray(first_steps) - 1, minlength=num_steps)
            # Row r holds steps r·block .. r·block + block − 1: a cumulative sum down the
            # columns repeats each first need every `block` steps.
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
        assert total == self.num_used_blocks, "stretch block count disagrees with the pool"
        return blocks_used
