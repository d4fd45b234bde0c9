"""A KV cache that keeps computed prompt blocks for reuse (``kv.prefix_caching=true``).

vLLM's automatic prefix caching (v1 ``KVCacheManager`` and its docs, "Automatic Prefix
Caching", read 2026-12-02), in block counts:

- A full block of a prompt is known by its tokens and every token before it. Once a step has
  computed it, the block is registered (``cache_computed``); a later request whose prompt starts
  with the same blocks is admitted holding them (reference counted) and computes only the rest
  (``admit_cached``). At least one prompt token is always computed: a fully cached prompt
  recomputes its last block, as vLLM caps a hit at ``num_tokens - 1``.
- A registered block that its last holder frees stays cached, evictable, and counts as free
  room. When the pool needs room, the least recently freed cached block is evicted. A request
  frees its blocks tail first, so a prompt's last blocks go before its first ones (as vLLM).
- A block some request holds is never evicted: only blocks with no holder are evictable.

``num_used_blocks`` keeps its meaning (blocks requests hold: KV use never counts cached, unheld
blocks); admission sees evictable blocks as free. Evictions happen when blocks are allocated, so
the cache holds what an LRU cache of the same size would, step by step.

Groups, not blocks. A request's prompt blocks come in groups of consecutive blocks
(``Request.prefix_groups``: a trace's hash blocks, ``sim.workload.prefixes``): a group is known
by a key that also names everything before it, and a prompt holds a group's first ``n`` blocks.
Every state here is kept per group, not per block, because it only ever changes at a group's
ends: a group's registered blocks are a prefix of it (registered head first, evicted tail
first); its held blocks are a prefix of those (a holder holds a prefix); its evictable blocks
are the rest, in pieces by when they were freed (older pieces at the tail). The cache does per
group what vLLM does per block, 32 times fewer steps for the shipped Mooncake trace. One
approximation: when two requests compute the same group at once and the one that registered its
first blocks is not the one that got further, vLLM registers the later blocks from the other;
here they stay that request's own (a hit on them is lost until the group is computed again).
Requests that run one at a time see exactly vLLM's hits and evictions (tested against a
per-block LRU).

Counters for ``summary.json``'s ``prefix_cache``: prompt tokens and blocks looked up at
admissions and found, blocks registered, and blocks evicted.
"""

from __future__ import annotations

from collections import deque

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
        "_groups",
        "_holding",
        "_registered_upto",
        "_lru",
        "_runs",
        "num_evictable_blocks",
        *COUNTERS,
    )
    prefix_caching = True

    def __init__(self, num_blocks: int, block_size: int, watermark: float = 0.0) -> None:
        super().__init__(num_blocks, block_size, watermark)
        self._groups: dict[int, _Group] = {}
        # per request: the groups it holds registered blocks of, and how many, in prompt order
        self._holding: dict[Request, list[tuple[_Group, int]]] = {}
        # per request: the first of its groups not wholly registered as its own, and that
        # group's first block (where registering goes on)
        self._registered_upto: dict[Request, tuple[int, int]] = {}
        # (run, group) for each piece made evictable, least recently freed first; an entry
        # whose piece was held again since is skipped
        self._lru: deque[tuple[int, _Group]] = deque()
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
        """Register ``request``'s full prompt blocks computed so far (after a step): in each
        group, those past the group's registered ones, when it holds all of those."""
        prefix = request.prefix_groups
        if not prefix:
            return
        # where the last call stopped: the first group not wholly its own yet, and its start
        at, start = self._registered_upto.get(request, (0, 0))
        computed = request.num_computed_tokens // self.block_size
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

    def _make_room(self) -> None:
        """Evict cached blocks until held and cached blocks fit in the pool."""
        need = self.num_used_blocks + self.num_evictable_blocks - self.num_blocks
        lru = self._lru
        evicted = 0
        while need > 0:
            run, group = lru[0]
            pieces = group.pieces
            if not pieces or pieces[-1][1] != run:
                lru.popleft()  # held again since it was freed
                continue
            start = pieces[-1][0]
            evict = group.registered - start
            if evict > need:
                evict = need
            group.registered -= evict
            need -= evict
            evicted += evict
            if group.registered == start:
                pieces.pop()
                lru.popleft()
                if not start and not group.holders:
                    del self._groups[group.key]
        self.num_evictable_blocks -= evicted
        self.evicted_blocks += evicted

    # (the base class also counts the blocks it has not named yet; nothing is named here)

    def grow(self, request: Request, num_tokens: int) -> int | None:
        added = super().grow(request, num_tokens)
        if added and self.num_used_blocks + self.num_evictable_blocks > self.num_blocks:
            self._make_room()
        return added

    def grow_decodes(self, decodes: list[Request], num_steps: int) -> list[int] | np.ndarray:
        used = super().grow_decodes(decodes, num_steps)
        if self.num_used_blocks + self.num_evictable_blocks > self.num_blocks:
            self._make_room()
        return used

    def free(self, request: Request) -> None:
        """Release ``request``'s blocks; cached ones nobody else holds become evictable (tail
        first), the others free."""
        self._registered_upto.pop(request, None)
        held = request.kv_slots // self.block_size
        request.kv_slots = 0
        holding = self._holding.pop(request, None)
        if holding is None:
            self.num_used_blocks -= held
            return
        self._runs += 1
        run = self._runs
        lru = self._lru
        cached = freed = 0
        for group, n in reversed(holding):
            cached += n
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
                lru.append((run, group))
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

    def check(self) -> None:
        """Assert the accounting agrees with itself (for tests)."""
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
        own = 0
        for request, holding in self._holding.items():
            blocks = request.kv_slots // self.block_size
            mine = sum(n for _, n in holding)
            assert mine <= blocks, "holds more cached blocks than blocks"
            for group, n in holding:
                assert self._groups[group.key] is group, "a held group left the cache"
                assert group.holders.get(request) == n, "holding disagrees"
            own += blocks - mine
        assert evictable == self.num_evictable_blocks, "evictable count disagrees"
        assert self.num_used_blocks >= held_by_groups, "held count below the cached ones held"
        assert self.num_used_blocks + self.num_evictable_blocks <= self.num_blocks, "over capacity"
        assert 0 <= self.num_used_blocks <= self.num_blocks, "pool over capacity"
        del own  # (requests without cached blocks are not listed: their blocks are all own)
