"""A KV cache that keeps computed prompt blocks for reuse (``kv.prefix_caching=true``).

What is kept, and for whom (vLLM v1's ``KVCacheManager`` and ``BlockPool``, and its docs,
"Automatic Prefix Caching"; SGLang's ``RadixCache``; read 2026-12-02), in block counts:

- A full block of a prompt is known by its tokens and every token before it. A waiting request
  is admitted holding the longest run of its leading blocks that are cached (shared, reference
  counted) and computes only the rest (``admit_cached``). At least one prompt token is always
  computed: a fully cached prompt recomputes its last block, as vLLM caps a hit at
  ``num_tokens - 1``.
- When a block is registered (cached): vLLM registers the blocks a step will compute when it
  allocates them, so a request admitted later in the same step already finds them
  (``free_queue=True``, from ``grow``); SGLang inserts a prefill's tokens into its radix tree
  when the step ends (``free_queue=False``, ``cache_computed``).
- Eviction, ``free_queue=True`` (vLLM's ``BlockPool``): every free block, cached or not, waits
  in one queue in the order it was freed; a new block is taken from the head, and a cached one
  taken so is evicted, even when uncached free blocks wait behind it. ``free_queue=False``
  (SGLang): cached blocks nobody holds are evicted, least recently freed first, only when no
  other block is free. Either way a request frees its blocks tail first (its own blocks, then
  its cached ones from the last), and a block some request holds is never evicted.

``num_used_blocks`` keeps its meaning (blocks requests hold: KV use never counts cached, unheld
blocks); admission sees evictable blocks as free.

Groups, not blocks. A request's prompt blocks come in groups of consecutive blocks
(``Request.prefix_groups``: a trace's hash blocks, ``sim.workload.prefixes``): a group is known
by a key that also names everything before it, and a prompt holds a group's first ``n`` blocks.
Every state here is kept per group, not per block, because it only ever changes at a group's
ends: a group's registered blocks are a prefix of it (registered head first, evicted tail
first); its held blocks are a prefix of those (a holder holds a prefix); its evictable blocks
are the rest, in pieces by when they were freed (older pieces at the tail). That is 32 times
fewer steps than per block for the shipped Mooncake trace. With requests one at a time the
hits and evictions equal a per-block model of either policy exactly (tested, whole and chunked
prefills). Left out, each a difference from vLLM:

- when two requests compute the same group at once and the one that registered its first blocks
  falls behind, vLLM registers the later blocks from the other; here they stay that request's
  own, uncached;
- a fully cached prompt's recomputed last block: vLLM caches the copy too (it does not
  de-duplicate), so it outlives the original's eviction; here it is the request's own;
- vLLM also caches full blocks of generated tokens; no later prompt here contains them (the
  trace's hash ids cover prompts), so they would only be evicted, and here they are plain free
  blocks; a preempted request's recompute may hit its own prompt, never its output.

Counters for ``summary.json``'s ``prefix_cache``: prompt tokens and blocks looked up at
admissions and found, blocks registered, and blocks evicted.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

import numpy as np

from sim.engine.kv_cache import KVCache
from sim.engine.request import Request

# what ``summary.json``'s ``prefix_cache`` adds up over a fleet's caches
COUNTERS = (
    "looked_up_tokens",
    "hit_tokens",
    "looked_up_blocks",
    "hit_blocks",
    "registered_blocks",
    "evicted_blocks",
)


class _Group:
    """One group's blocks in the cache: ``registered`` leading blocks cached, the first ``held``
    of them held (the largest holder's extent), the rest evictable in ``pieces``: ``[start,
    run]`` from the head, each up to the next one's start (the last up to ``registered``),
    ``run`` the free that made it evictable."""

    __slots__ = ("key", "registered", "held", "holders", "pieces")

    def __init__(self, key: int, registered: int, holder: Request) -> None:
        """A group first registered by ``holder``, which holds its ``registered`` blocks."""
        self.key = key
        self.registered = self.held = registered
        self.holders: dict[Request, int] = {holder: registered}
        self.pieces: list[list[int]] = []


class PrefixCachingKVCache(KVCache):
    """``KVCache`` with a prefix cache (module docstring). Blocks are counted, not named."""

    __slots__ = (
        "free_queue",
        "_groups",
        "_holding",
        "_registered_upto",
        "_lru",
        "_runs",
        "num_evictable_blocks",
        *COUNTERS,
    )
    prefix_caching = True

    def __init__(
        self, num_blocks: int, block_size: int, watermark: float = 0.0, free_queue: bool = True
    ) -> None:
        super().__init__(num_blocks, block_size, watermark)
        self.free_queue = free_queue
        self._groups: dict[int, _Group] = {}
        # per request: the groups it holds registered blocks of, and how many, in prompt order
        self._holding: dict[Request, list[tuple[_Group, int]]] = {}
        # per request: the first of its groups not wholly registered as its own, and that
        # group's first block (where registering goes on)
        self._registered_upto: dict[Request, tuple[int, int]] = {}
        # the free blocks in eviction order, least recently freed first: [run, group, 0] for a
        # cached piece (skipped once held again), and with the free queue [run, None, count]
        # for blocks that hold nothing cached (at first, the whole pool)
        self._lru: deque[list[Any]] = deque([[0, None, num_blocks]] if free_queue else [])
        self._runs = 0
        self.num_evictable_blocks = 0
        self.looked_up_tokens = 0
        self.hit_tokens = 0
        self.looked_up_blocks = 0  # full prompt blocks that could have been hits
        self.hit_blocks = 0
        self.registered_blocks = 0
        self.evicted_blocks = 0

    # -- lookup and admission ------------------------------------------------------------------

    def _hits(self, request: Request) -> list[tuple[int, _Group, int]]:
        """(key, group, blocks) of ``request``'s longest cached prefix, group by group, leaving
        at least one of the tokens it would compute now (``num_uncomputed_tokens``)."""
        found: list[tuple[int, _Group, int]] = []
        prefix = request.prefix_groups
        if not prefix:
            return found
        left = (request.num_uncomputed_tokens - 1) // self.block_size
        groups = self._groups
        for key, n in prefix:
            if left <= 0:
                break
            group = groups.get(key)
            if group is None:
                break
            take = group.registered
            if take > n:
                take = n
            if take > left:
                take = left
            if take:
                found.append((key, group, take))
                left -= take
            if take < n:
                break
        return found

    def cached_tokens(self, request: Request) -> int:
        return sum(take for _, _, take in self._hits(request)) * self.block_size

    def admit_cached(self, request: Request, num_tokens: int) -> int | None:
        assert request.kv_slots == 0, "admit_cached: the request already holds blocks"
        hits = self._hits(request)
        block = self.block_size
        hit_blocks = sum(take for _, _, take in hits)
        revived = sum(max(0, take - group.held) for _, group, take in hits)
        new = -(-(hit_blocks * block + num_tokens) // block) - hit_blocks
        if new + revived > self.num_blocks - self.num_used_blocks - self.watermark_blocks:
            return None
        for _, group, take in hits:
            group.holders[request] = take
            if take > group.held:
                self._revive(group, take)
        if hits:
            self._holding[request] = [(group, take) for _, group, take in hits]
        self.num_used_blocks += revived
        self.num_evictable_blocks -= revived
        request.kv_slots = hit_blocks * block
        grown = self.grow(request, hit_blocks * block + num_tokens)
        assert grown is not None, "admit_cached: the room checked was not there"
        uncomputed = request.num_uncomputed_tokens
        self.looked_up_tokens += uncomputed
        self.hit_tokens += hit_blocks * block
        if request.prefix_groups:  # the full prompt blocks that could have been hits
            full = sum(n for _, n in request.prefix_groups)
            self.looked_up_blocks += min(full, (uncomputed - 1) // block)
        self.hit_blocks += hit_blocks
        return hit_blocks * block

    @staticmethod
    def _revive(group: _Group, upto: int) -> None:
        """Hold ``group``'s evictable blocks before ``upto`` again (its pieces lose them)."""
        pieces = group.pieces
        while len(pieces) > 1 and pieces[1][0] <= upto:
            del pieces[0]
        if pieces:
            if upto >= group.registered:
                pieces.clear()
            else:
                pieces[0][0] = max(pieces[0][0], upto)
        group.held = upto

    # -- registration -------------------------------------------------------------------------

    def cache_computed(self, request: Request) -> None:
        """After a step: register ``request``'s full prompt blocks computed so far (SGLang's
        radix cache inserts a prefill's tokens when it ends; with the free queue, vLLM's, the
        blocks were registered when allocated)."""
        if not self.free_queue and request.prefix_groups:
            self._register(request, request.num_computed_tokens // self.block_size)

    def _register(self, request: Request, computed: int) -> None:
        """Register ``request``'s first ``computed`` full prompt blocks: in each group, those
        past the group's registered ones, when it holds all of those."""
        prefix = request.prefix_groups
        assert prefix
        # where the last call stopped: the first group not wholly its own yet, and its start
        at, start = self._registered_upto.get(request, (0, 0))
        if computed <= start or at >= len(prefix):
            return
        groups = self._groups
        holding = self._holding.get(request)
        if holding is None:
            holding = self._holding[request] = []
        registered_now = 0
        end = len(prefix)
        while at < end and computed > start:
            key, n = prefix[at]
            upto = computed - start
            if upto > n:
                upto = n
            group = groups.get(key)
            if group is None:
                # nobody computed this group before: its blocks become the registered ones
                group = groups[key] = _Group(key, upto, request)
                holding.append((group, upto))
                registered_now += upto
                mine = upto
            else:
                registered = group.registered
                mine = group.holders.get(request, 0)
                if upto > registered and mine == registered:
                    # its own blocks after the registered ones become the registered ones
                    registered_now += upto - registered
                    group.registered = group.held = upto  # (nobody holds more than it)
                    group.holders[request] = upto
                    if mine:
                        holding[-1] = (group, upto)  # (the group it holds last)
                    else:
                        holding.append((group, upto))
                    mine = upto
                elif upto > mine:
                    at = end  # a copy of its own from here: no later block is a prefix
                    break
            if mine < n:
                break  # the rest of this group is not computed yet
            at += 1
            start += n
        self._registered_upto[request] = (at, start)
        self.registered_blocks += registered_now
        if not holding:
            del self._holding[request]

    # -- allocation: evict least recently freed cached blocks when room runs out ---------------

    def _consume(self, count: int) -> None:
        """Take ``count`` blocks from the head of the free blocks, evicting the cached ones
        among them (with the free queue: every allocation; else only what room requires)."""
        lru = self._lru
        evicted = 0
        while count > 0:
            entry = lru[0]
            run, group, empty = entry
            if group is None:  # blocks that hold nothing cached
                if empty > count:
                    entry[2] = empty - count
                    break
                count -= empty
                lru.popleft()
                continue
            pieces = group.pieces
            if not pieces or pieces[-1][1] != run:
                lru.popleft()  # held again since it was freed
                continue
            start = pieces[-1][0]
            evict = group.registered - start
            if evict > count:
                evict = count
            group.registered -= evict
            count -= evict
            evicted += evict
            if group.registered == start:
                pieces.pop()
                lru.popleft()
                if not start and not group.holders:
                    del self._groups[group.key]
        self.num_evictable_blocks -= evicted
        self.evicted_blocks += evicted

    def _allocated(self, count: int) -> None:
        """``count`` blocks were just allocated: take them from the free blocks."""
        if self.free_queue:
            self._consume(count)
        else:  # cached blocks are evicted only when there is no other room
            over = self.num_used_blocks + self.num_evictable_blocks - self.num_blocks
            if over > 0:
                self._consume(over)

    # (the base class also counts the blocks it has not named yet; nothing is named here)

    def grow(self, request: Request, num_tokens: int) -> int | None:
        added = super().grow(request, num_tokens)
        if added:
            self._allocated(added)
        if self.free_queue and added is not None and request.prefix_groups:
            # vLLM caches the blocks of the tokens a step will compute when it allocates them
            self._register(request, num_tokens // self.block_size)
        return added

    def grow_decodes(self, decodes: list[Request], num_steps: int) -> list[int] | np.ndarray:
        before = self.num_used_blocks
        used = super().grow_decodes(decodes, num_steps)
        if self.num_used_blocks > before:
            self._allocated(self.num_used_blocks - before)
        return used

    def free(self, request: Request) -> None:
        """Release ``request``'s blocks, tail first: cached ones nobody else holds become
        evictable, the others free."""
        self._registered_upto.pop(request, None)
        held = request.kv_slots // self.block_size
        request.kv_slots = 0
        holding = self._holding.pop(request, None)
        self._runs += 1
        run = self._runs
        lru = self._lru
        if holding is None:
            self.num_used_blocks -= held
            if self.free_queue and held:
                lru.append([run, None, held])
            return
        cached = sum(n for _, n in holding)
        if self.free_queue and held > cached:
            # its own blocks (its last prompt block, its output) are its table's tail
            lru.append([run, None, held - cached])
        freed = 0
        for group, _ in reversed(holding):
            holders = group.holders
            del holders[request]
            still = max(holders.values()) if holders else 0
            if still < group.held:
                freed += group.held - still
                if group.pieces:
                    group.pieces.insert(0, [still, run])
                else:
                    group.pieces.append([still, run])
                group.held = still
                lru.append([run, group, 0])
        # its own blocks are freed, the cached ones nobody else holds become evictable
        self.num_used_blocks -= held - cached + freed
        self.num_evictable_blocks += freed
        assert self.num_used_blocks >= 0, "KV pool went negative"

    # -- what the base class names per block ---------------------------------------------------

    def blocks_of(self, request: Request) -> tuple[int, ...]:
        raise NotImplementedError("a prefix-caching cache counts blocks; it does not name them")

    def attach(self, request: Request, block_ids: object) -> None:
        raise NotImplementedError("a prefix-caching cache attaches cached prefixes itself")

    @property
    def num_cached_blocks(self) -> int:
        """Blocks registered (held or evictable)."""
        return sum(g.registered for g in self._groups.values())

    def check(self, requests: Iterable[Request] | None = None) -> None:
        """Assert the accounting agrees with itself (for tests); with ``requests``, every
        request holding blocks, also that they hold exactly the blocks counted in use."""
        held_by_groups = 0
        evictable = 0
        for group in self._groups.values():
            assert group.held == max(group.holders.values(), default=0), "held extent"
            assert 0 <= group.held <= group.registered, "held beyond the registered blocks"
            pieces = group.pieces
            if group.registered > group.held:
                assert pieces and pieces[0][0] == group.held, "evictable blocks without a piece"
            starts = [p[0] for p in pieces]
            assert starts == sorted(set(starts)), "pieces out of order"
            assert all(s < group.registered for s in starts), "an empty piece"
            runs = [p[1] for p in pieces]
            assert runs == sorted(runs, reverse=True), "older pieces must be at the tail"
            held_by_groups += group.held
            evictable += group.registered - group.held
        for request, holding in self._holding.items():
            assert sum(n for _, n in holding) <= request.kv_slots // self.block_size
            for group, n in holding:
                assert self._groups[group.key] is group, "a held group left the cache"
                assert group.holders.get(request) == n, "holding disagrees"
        assert evictable == self.num_evictable_blocks, "evictable count disagrees"
        free = self.num_blocks - self.num_used_blocks
        assert 0 <= self.num_evictable_blocks <= free, "cached blocks beyond the free ones"
        if self.free_queue:
            empty = sum(entry[2] for entry in self._lru if entry[1] is None)
            assert empty + self.num_evictable_blocks == free, "the free queue lost blocks"
        if requests is not None:
            own = 0
            for request in requests:
                holding = self._holding.get(request, [])
                own += request.kv_slots // self.block_size - sum(n for _, n in holding)
            assert self.num_used_blocks == held_by_groups + own, "blocks in use disagree"
