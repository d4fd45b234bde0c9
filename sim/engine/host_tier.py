"""A prefix cache's second tier: blocks evicted from GPU memory, kept in host memory.

``kv.cpu_offload_gib=N`` gives each replica ``N`` GiB of host memory (over all its GPUs, as
vLLM's ``--kv-offloading-size`` counts it) for blocks the prefix cache (``sim.engine.
prefix_cache``) evicts. A block evicted from the GPU is copied to host memory instead of being
lost; a later request whose cached prefix runs on into host memory copies those blocks back
before the step that uses them (the step pays ``tokens x KV bytes per token / host link``,
``sim.engine.step_time.base.HostLoadStepTime``), and computes only the rest. A block copied back
leaves host memory (it is on the GPU again: one copy, as SGLang's HiCache with write-back keeps
it); a full host memory evicts its least recently stored blocks, and they are recomputed when
next needed.

vLLM's offloading connector differs in one way: it stores every computed block to host memory
as soon as it is computed (write-through), so its host tier holds a copy of what the GPU holds as
well; here the host holds only what the GPU evicted, so a host tier smaller than the GPU cache
still adds hits. Both load a host hit before the step that needs it. The copy to host memory is
taken as free (it overlaps the steps, on its own stream in both engines).

Per span (``prefix_cache._Span``, a run of groups of blocks; "group" below, as the tier only
needs its identity), as the prefix cache keeps its state: a span's host blocks run on from its
GPU-cached ones, ``[registered, end)``, because the GPU evicts a span tail first and its newest
evictions join the front of the host range. They are kept in pieces by when they were stored
(older pieces at the tail); the host evicts from the tail of the oldest piece, so eviction is
least recently stored first, block by block.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from mypy_extensions import mypyc_attr


@mypyc_attr(allow_interpreted_subclasses=True)
class HostTier:
    """Host-memory blocks per group (module docstring). Groups are the prefix cache's spans;
    ``forget(group)`` is called when eviction shortens one's host range (the cache then forgets
    what no longer has a block anywhere)."""

    __slots__ = (
        "num_blocks",
        "num_used_blocks",
        "_end",
        "_pieces",
        "_lru",
        "_runs",
        "_forget",
        "stored_blocks",
        "loaded_blocks",
        "evicted_blocks",
    )

    def __init__(self, num_blocks: int, forget: Callable[[Any], None]) -> None:
        assert num_blocks >= 1, "a host tier holds at least one block"
        self.num_blocks = num_blocks
        self.num_used_blocks = 0
        self._end: dict[Any, int] = {}  # group -> end of its host range
        # group -> its host pieces [start, run], ascending starts (the newest at the front)
        self._pieces: dict[Any, list[list[int]]] = {}
        self._lru: deque[tuple[int, Any]] = deque()  # (run, group), least recently stored first
        self._runs = 0
        self._forget = forget
        self.stored_blocks = 0  # blocks copied to host memory
        self.loaded_blocks = 0  # blocks copied back to the GPU
        self.evicted_blocks = 0  # blocks the host dropped (full)

    def end(self, group: Any) -> int:
        """The end of ``group``'s host range (0: none; it starts at the group's GPU extent)."""
        return self._end.get(group, 0)

    def store(self, group: Any, start: int, count: int) -> None:
        """The GPU evicted ``group``'s blocks ``[start, start + count)``, the tail of its GPU
        extent: keep them, ahead of the group's older host blocks."""
        pieces = self._pieces.get(group)
        assert pieces is None or pieces[0][0] == start + count, "host range not contiguous"
        room = self.num_blocks - self.num_used_blocks
        if count > room:
            self._evict(min(count - room, self.num_used_blocks), storing=group)
        # more than the whole tier: keep the front, the blocks a lookup reaches first (all the
        # group's older host blocks, behind them, were just evicted)
        count = min(count, self.num_blocks)
        self._runs += 1
        pieces = self._pieces.get(group)
        if pieces is None:
            self._pieces[group] = [[start, self._runs]]
            self._end[group] = start + count
        else:
            pieces.insert(0, [start, self._runs])
        self._lru.append((self._runs, group))
        self.num_used_blocks += count
        self.stored_blocks += count

    def take(self, group: Any, upto: int, loaded: bool = True) -> int:
        """``group``'s host blocks before ``upto`` are on the GPU again: drop them (``loaded``:
        copied back, counted; else recomputed by a request that did not find them). Returns
        how many."""
        pieces = self._pieces.get(group)
        if pieces is None or upto <= pieces[0][0]:
            return 0
        end = self._end[group]
        taken = min(upto, end) - pieces[0][0]
        if upto >= end:
            del self._pieces[group], self._end[group]
        else:
            while len(pieces) > 1 and pieces[1][0] <= upto:
                del pieces[0]
            pieces[0][0] = upto
        self.num_used_blocks -= taken
        if loaded:
            self.loaded_blocks += taken
        return taken

    def _evict(self, count: int, storing: Any) -> None:
        """Drop ``count`` blocks, least recently stored first (a group's tail first); the group
        being stored is not forgotten when it loses them all."""
        lru = self._lru
        while count > 0:
            run, group = lru[0]
            pieces = self._pieces.get(group)
            if pieces is None or pieces[-1][1] != run:
                lru.popleft()  # taken back to the GPU since it was stored
                continue
            start = pieces[-1][0]
            end = self._end[group]
            drop = min(end - start, count)
            end -= drop
            count -= drop
            self.num_used_blocks -= drop
            self.evicted_blocks += drop
            if end > start:
                self._end[group] = end
            else:
                lru.popleft()
                pieces.pop()
                if pieces:
                    self._end[group] = end
                else:
                    del self._pieces[group], self._end[group]
            if group is not storing:  # (its store goes on, and the cache looks at it after)
                self._forget(group)

    def start(self, group: Any) -> int | None:
        """Where ``group``'s host range starts (None: it has none)."""
        pieces = self._pieces.get(group)
        return None if pieces is None else pieces[0][0]

    def groups(self) -> list[Any]:
        """The groups with blocks in host memory."""
        return list(self._pieces)

    def check(self) -> None:
        """Assert the accounting agrees with itself (for tests)."""
        used = 0
        for group, pieces in self._pieces.items():
            starts = [p[0] for p in pieces]
            runs = [p[1] for p in pieces]
            assert pieces and starts == sorted(set(starts)), "pieces out of order"
            assert runs == sorted(runs, reverse=True), "older pieces must be at the tail"
            assert starts[-1] < self._end[group], "an empty piece"
            used += self._end[group] - starts[0]
        assert set(self._end) == set(self._pieces)
        assert used == self.num_used_blocks <= self.num_blocks, "host blocks disagree"
