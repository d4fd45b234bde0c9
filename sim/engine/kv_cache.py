"""The paged KV cache of one replica: a pool of numbered blocks, allocated on demand.

A request holding ``t`` tokens of KV needs ``ceil(t / block_size)`` blocks (vLLM's paged
attention). Blocks have ids, ``0 .. num_blocks - 1``, and a block can be held by several
requests at once: a request can start with blocks another request holds (``attach``, the seam a
prefix cache builds on), and a shared block is released only when its last holder lets go. The
cache keeps the block tables and the reference counts; a request only carries ``kv_slots``, the
tokens its blocks can take, which the cache keeps so that a scheduler's "room for one more
token?" is an attribute read.

Ids are given when a block is first addressed. Allocating counts a block as held; ``blocks_of``
(or ``attach``) names it, taking an id from the free ones. Most blocks are never addressed
(nothing shares them), so allocating, growing a decode stretch and freeing stay arithmetic on
counts, as fast as counting blocks alone::

    num_blocks = free ids (unheld blocks + held blocks not named yet) + named, held ids
    held blocks (num_used_blocks) = named, held ids + held blocks not named yet

Reference counts are kept sparsely: a named block has one holder unless ``_shared`` says how
many more it has.

The cache allocates and frees; it never decides who runs. "Not enough blocks right now" is an
expected shortage and answers ``None``; the scheduler decides whether to wait or to preempt.
The watermark (a fraction of all blocks) is kept free when *admitting* new requests, so running
requests have room to grow before anyone must be preempted (vLLM's ``watermark``).

Decode stretches (see ``sim.fleet.replica``) grow many requests by one token per step for ``k``
steps at once. A request with ``s`` slots and ``c`` tokens computed first needs a new block at
step ``s − c + 1`` of the stretch, then every ``block_size`` steps; ``decode_steps_that_fit``
and ``grow_decodes`` do that arithmetic for the whole batch.

A prefix cache (``sim.engine.prefix_cache``) builds on this one. Left out: fragmentation inside
a block beyond the rounding up, swapping blocks to host memory.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from mypy_extensions import mypyc_attr

from sim.engine.request import Request
from sim.engine.step_time.base import VECTOR_MIN_STEPS
from sim.errors import require


# copyable in the compiled build too (see sim.engine.scheduler.base.Scheduler)
@mypyc_attr(allow_interpreted_subclasses=True)
class KVCache:
    """Block accounting for one replica."""

    # whether computed prompt blocks are kept for reuse (``sim.engine.prefix_cache``)
    prefix_caching = False
    # cached tokens copied back from host memory for the step being planned, and by the last
    # admission (a prefix cache's host tier; none here)
    pending_loaded_tokens = 0
    last_loaded_tokens = 0

    __slots__ = (
        "num_blocks",
        "block_size",
        "watermark_blocks",
        "num_used_blocks",
        "_free_ids",
        "_unnamed",
        "_tables",
        "_shared",
    )

    def __init__(self, num_blocks: int, block_size: int, watermark: float = 0.0) -> None:
        require(num_blocks >= 1, "kv.num_blocks", num_blocks, "must be >= 1")
        require(block_size >= 1, "kv.block_size", block_size, "must be >= 1")
        require(0.0 <= watermark < 1.0, "kv.watermark", watermark, "must be in [0, 1)")
        self.num_blocks = int(num_blocks)
        self.block_size = int(block_size)
        self.watermark_blocks = int(math.ceil(watermark * num_blocks))
        self.num_used_blocks = 0
        """Blocks held by at least one request."""
        # Ids no request holds by name, as a stack (the lowest id is named first).
        self._free_ids: list[int] = list(range(self.num_blocks - 1, -1, -1))
        self._unnamed = 0  # held blocks without an id yet
        # each request's named blocks, in token order (its unnamed ones follow them)
        self._tables: dict[Request, list[int]] = {}
        # block id -> holders beyond the first; a named held block absent from it has one
        self._shared: dict[int, int] = {}

    @property
    def num_free_blocks(self) -> int:
        return self.num_blocks - self.num_used_blocks

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks needed to hold ``num_tokens`` tokens of KV."""
        return -(-num_tokens // self.block_size)

    # -- what a request holds ----------------------------------------------------------------

    def blocks_of(self, request: Request) -> tuple[int, ...]:
        """The ids of the blocks ``request`` holds, in token order (naming any not named yet)."""
        held = request.kv_slots // self.block_size
        if not held:
            return ()
        table = self._tables.get(request)
        if table is None:
            table = self._tables[request] = []
        missing = held - len(table)
        if missing:
            free_ids = self._free_ids
            table += reversed(free_ids[-missing:])  # the stack's top, lowest id first
            del free_ids[-missing:]
            self._unnamed -= missing
        return tuple(table)

    def ref_count(self, block_id: int) -> int:
        """How many requests hold block ``block_id`` by that id: 0 when nobody does (the id is
        free, though a held block not yet named may take it). O(num_blocks): for checks."""
        require(
            0 <= block_id < self.num_blocks,
            "block_id",
            block_id,
            f"must be in [0, {self.num_blocks})",
        )
        if block_id in self._free_ids:
            return 0
        return 1 + self._shared.get(block_id, 0)

    def check(self) -> None:
        """Assert the accounting agrees with itself (for tests; O(blocks held))."""
        holders: dict[int, int] = {}
        for request, table in self._tables.items():
            assert len(table) == len(set(table)), "a request holds an id twice"
            assert len(table) <= request.kv_slots // self.block_size, "more ids than blocks"
            for block_id in table:
                holders[block_id] = holders.get(block_id, 0) + 1
        free_ids = set(self._free_ids)
        assert len(free_ids) == len(self._free_ids), "a free id listed twice"
        assert not free_ids.intersection(holders), "a held id is also free"
        assert len(holders) + len(free_ids) == self.num_blocks, "ids lost"
        for block_id, count in holders.items():
            assert count == 1 + self._shared.get(block_id, 0), f"block {block_id}: ref count"
        assert set(self._shared) <= set(holders), "a shared id nobody holds"
        assert self.num_used_blocks == len(holders) + self._unnamed, "held count disagrees"
        assert 0 <= self.num_used_blocks <= self.num_blocks, "pool over capacity"

    # -- allocation ----------------------------------------------------------------------------

    def grow(self, request: Request, num_tokens: int) -> int | None:
        """Make ``request`` hold KV for ``num_tokens`` tokens; return the blocks added, or None.

        None means the pool has too few free blocks now; nothing changes then.
        """
        block = self.block_size
        needed = -(-num_tokens // block) - request.kv_slots // block
        if needed <= 0:
            return 0
        if needed > self.num_blocks - self.num_used_blocks:
            return None
        request.kv_slots += needed * block
        self.num_used_blocks += needed
        self._unnamed += needed
        return needed

    def admit(self, request: Request, num_tokens: int) -> int | None:
        """Like ``grow`` for a request not yet running: also keeps the watermark free."""
        needed = -(-num_tokens // self.block_size) - request.kv_slots // self.block_size
        if needed > self.num_blocks - self.num_used_blocks - self.watermark_blocks:
            return None
        return self.grow(request, num_tokens)

    # -- a prefix cache's questions (``sim.engine.prefix_cache``), answered for none --------

    def cached_tokens(self, request: Request) -> int:
        """Prompt tokens of ``request`` found cached if it were admitted now: none here."""
        return 0

    def admit_cached(self, request: Request, num_tokens: int) -> int | None:
        """Admit the waiting ``request`` with room for ``num_tokens`` more tokens: the tokens
        found cached (none here), or None when the pool lacks room above the watermark."""
        if self.admit(request, request.num_computed_tokens + num_tokens) is None:
            return None
        return 0

    def cache_computed(self, request: Request) -> None:
        """Keep ``request``'s computed prompt blocks for reuse: nothing to keep here."""

    def take_loaded_tokens(self) -> int:
        """Cached tokens copied back from host memory since the last call: none here."""
        return 0

    def attach(self, request: Request, block_ids: Sequence[int]) -> None:
        """Let ``request``, which holds no blocks yet, start with ``block_ids``: named blocks
        other requests hold (a shared prefix). They stay held until every holder frees them."""
        assert request.kv_slots == 0, "attach: the request already holds blocks"
        held = set(block_ids)
        assert len(held) == len(block_ids), "attach: a block listed twice"
        assert not held.intersection(self._free_ids), "attach: a block nobody holds by name"
        shared = self._shared
        for block_id in block_ids:
            shared[block_id] = shared.get(block_id, 0) + 1
        self._tables[request] = list(block_ids)
        request.kv_slots = len(block_ids) * self.block_size

    def can_ever_hold(self, num_tokens: int) -> bool:
        """Whether a request of ``num_tokens`` tokens fits even in an otherwise empty pool."""
        return self.blocks_for(num_tokens) <= self.num_blocks - self.watermark_blocks

    @property
    def max_request_tokens(self) -> int:
        """The most tokens one request can hold (``can_ever_hold``'s bound)."""
        return max(0, (self.num_blocks - self.watermark_blocks) * self.block_size)

    def free(self, request: Request) -> None:
        """Release ``request``'s hold on its blocks; a block nobody else holds becomes free."""
        held = request.kv_slots // self.block_size
        request.kv_slots = 0
        table = self._tables.pop(request, None)
        if table is None:  # the common case: nothing named, nothing shared
            self._unnamed -= held
            self.num_used_blocks -= held
            return
        self._unnamed -= held - len(table)
        shared, released = self._shared, []
        for block_id in table:
            others = shared.get(block_id)
            if others is None:
                released.append(block_id)
            elif others == 1:
                del shared[block_id]
            else:
                shared[block_id] = others - 1
        self._free_ids += released
        self.num_used_blocks -= held - len(table) + len(released)
        assert self._unnamed >= 0 and self.num_used_blocks >= 0, "KV pool went negative"

    # -- decode stretches ------------------------------------------------------------------

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

    def decode_growth_blocks(self, decodes: list[Request], num_steps: int) -> int:
        """The blocks ``grow_decodes(decodes, num_steps)`` would add, adding none."""
        block = self.block_size
        grown = 0
        for request in decodes:
            step = request.kv_slots - request.num_computed_tokens + 1
            if step <= num_steps:
                grown += (num_steps - step) // block + 1
        return grown

    def grow_decodes(self, decodes: list[Request], num_steps: int) -> list[int] | np.ndarray:
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
                request.kv_slots += new_blocks * block
                grown += new_blocks
        self.num_used_blocks += grown
        self._unnamed += grown
        assert self.num_used_blocks <= self.num_blocks, (
            f"decode stretch outgrew the KV pool ({self.num_used_blocks} > {self.num_blocks})"
        )
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
            assert total == self.num_used_blocks, "stretch block count disagrees with the pool"
            return blocks_used
        added_at = [0] * num_steps
        for step in first_steps:
            while step <= num_steps:
                added_at[step - 1] += 1
                step += block
        used, total = [], used_before
        for added_now in added_at:
            total += added_now
            used.append(total)
        assert total == self.num_used_blocks, "stretch block count disagrees with the pool"
        return used
