"""The paged KV cache of one replica: a pool of fixed-size blocks, allocated on demand.

A request holding ``t`` tokens of KV needs ``ceil(t / block_size)`` blocks (vLLM's paged
attention). Blocks are only counted, never addressed: Fleetcast does not model fragmentation
inside a block beyond the rounding up, nor prefix sharing between requests.

The cache allocates and frees; it never decides who runs. "Not enough blocks right now" is an
expected shortage and answers ``None``; the scheduler decides whether to wait or to preempt.
The watermark (a fraction of all blocks) is kept free when *admitting* new requests, so running
requests have room to grow before anyone must be preempted (vLLM's ``watermark``).
"""

from __future__ import annotations

import math

from sim.errors import require
from sim.request import Request


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
        assert self.num_used_blocks >= 0, f"KV pool went negative ({self.num_used_blocks} blocks)"
