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

Spans, not blocks. A request's prompt blocks come in groups of consecutive blocks
(``Request.prefix_groups``: a trace's hash blocks, ``sim.workload.prefixes``): a group is known
by a key that also names everything before it, and a prompt holds a group's first ``n`` blocks,
and every group before it whole. The state is kept per span, a run of consecutive groups of one
chain registered one after another (a group a request registers joins the last span it holds
when it holds all of that span, else starts one), because it only ever changes at a span's ends:
a span's registered blocks are a prefix of it (registered head first, evicted tail first; a
group leaves the span, and the cache, with its last block); its held blocks are a prefix of
those (a holder holds a prefix); its evictable blocks are the rest, in pieces by when they were
freed (older pieces at the tail). Evicting a span's tail takes its groups as state kept per
group would (the later first: they were freed together, tail first). What remains per group is
its key, in the cache's index and in its span, entered when it is registered and dropped when
its last block is evicted. A prompt of the shipped Mooncake trace mostly holds two spans (one
shared, one its own) of its 24 groups on average, 32 blocks each. With requests one at a time
the hits and evictions equal a per-block model of either policy exactly (tested, whole and
chunked prefills). Left out, each a difference from vLLM:

- when two requests compute the same group at once and the one that registered its first blocks
  falls behind, vLLM registers the later blocks from the other; here they stay that request's
  own, uncached;
- a fully cached prompt's recomputed last block: vLLM caches the copy too (it does not
  de-duplicate), so it outlives the original's eviction; here it is the request's own;
- vLLM caches full blocks of generated tokens as they fill; here they are registered when the
  request frees its blocks (it completed, or was preempted), as SGLang inserts a finished
  request. Only content that says what a reply holds can share them (a conversation's next turn,
  ``sim.workload.sessions``: its prompt holds this turn's reply; a trace's hash ids cover prompts
  alone), and a next turn is sent only after the reply ended, so the difference never shows.

A second tier (``host``, ``kv.cpu_offload_gib``, ``sim.engine.host_tier``): blocks evicted from
a span go to host memory, where they run on from its registered ones (a span evicts tail
first); a span's groups stay known while any of their blocks is on the GPU or in host memory. A
lookup that reaches past a span's registered blocks into its host ones copies those back at
admission (they become registered and held again, and leave host memory), and the step pays
the copy (``take_loaded_tokens`` gives the step's count to the replica, which puts it in
``StepShape.host_loaded_tokens``, priced by ``sim.engine.step_time.base.HostLoadStepTime``).

Counters for ``summary.json``'s ``prefix_cache``: prompt tokens and blocks looked up at
admissions and found, blocks registered, and blocks evicted; with a host tier, also the tokens
found there and its blocks stored, loaded back and evicted.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from operator import itemgetter
from typing import Any

import numpy as np
from mypy_extensions import mypyc_attr

from sim.engine.host_tier import HostTier
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


@mypyc_attr(allow_interpreted_subclasses=True)
class _Span:
    """Consecutive groups of one chain in the cache: their ``keys`` in chain order, ``starts``
    (each one's first block in the span), ``last`` the last one's start; every group but the
    last is whole, and the last has a registered block. ``registered`` leading blocks are
    cached, the first ``held`` of them held (the largest extent in ``holders``), the rest
    evictable in ``pieces``: ``[start, run]`` from the head, each up to the next one's start (the
    last up to ``registered``), ``run`` the free that made it evictable."""

    __slots__ = ("keys", "starts", "last", "registered", "held", "holders", "pieces")

    def __init__(self, holder: Request) -> None:
        """An empty span that ``holder`` is about to register its groups in."""
        self.keys: list[int] = []
        self.starts: dict[int, int] = {}
        self.last = self.registered = self.held = 0
        self.holders: dict[Request, int] = {holder: 0}
        self.pieces: list[list[int]] = []


@mypyc_attr(allow_interpreted_subclasses=True)
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
        "host",
        "pending_loaded_tokens",
        "last_loaded_tokens",
        "host_hit_tokens",
        *COUNTERS,
    )
    prefix_caching = True

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        watermark: float = 0.0,
        free_queue: bool = True,
        host_blocks: int = 0,
    ) -> None:
        """``host_blocks`` > 0: a second tier of that many blocks in host memory."""
        super().__init__(num_blocks, block_size, watermark)
        self.free_queue = free_queue
        self.host = HostTier(host_blocks, self._forget_evicted) if host_blocks else None
        # tokens copied back from host memory by admissions since the replica last asked (the
        # step being planned), and by the last admission
        self.pending_loaded_tokens = 0
        self.last_loaded_tokens = 0
        self.host_hit_tokens = 0
        # each cached group's key: the span it is in
        self._groups: dict[int, _Span] = {}
        # per request: the spans it holds registered blocks of, in prompt order (how many of
        # each: the span's ``holders``)
        self._holding: dict[Request, list[_Span]] = {}
        # per request: the first of its groups not wholly registered as its own, and that
        # group's first block (where registering goes on)
        self._registered_upto: dict[Request, tuple[int, int]] = {}
        # the free blocks in eviction order, least recently freed first: [run, span, 0] for a
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

    def _hits(self, request: Request) -> tuple[int, list[tuple[_Span, int]]]:
        """The blocks of ``request``'s longest cached prefix, leaving at least one of the tokens
        it would compute now (``num_uncomputed_tokens``), and (span, leading blocks) for each
        span it reaches."""
        found: list[tuple[_Span, int]] = []
        prefix = request.prefix_groups
        if not prefix:
            return 0, found
        left = (request.num_uncomputed_tokens - 1) // self.block_size
        groups = self._groups
        span: _Span | None = None
        extent = total = 0
        for key, n in prefix:
            if left <= 0:
                break
            here = groups.get(key)
            if here is None:
                break
            start = here.starts[key]
            if here is not span:
                # a prompt enters a span at its head: each group's predecessor comes before it
                assert not start, "a prompt reached a span past its head"
                if span is not None:
                    found.append((span, extent))
                span = here
            # (a group before the span's last is whole: its n blocks are registered, or in
            # host memory after the registered ones)
            take = here.registered - start
            host = self.host
            if host is not None and take < n:
                end = host.end(here)
                if end > here.registered:
                    take = end - start
            if take > n:
                take = n
            if take > left:
                take = left
            extent = start + take
            total += take
            left -= take
            if take < n:
                break
        if span is not None:
            found.append((span, extent))
        return total, found

    def cached_tokens(self, request: Request) -> int:
        return self._hits(request)[0] * self.block_size

    def admit_cached(self, request: Request, num_tokens: int) -> int | None:
        assert request.kv_slots == 0, "admit_cached: the request already holds blocks"
        hit_blocks, hits = self._hits(request)
        block = self.block_size
        revived = loaded = 0
        for span, extent in hits:
            registered = span.registered
            if extent > registered:  # the rest from host memory
                loaded += extent - registered
                extent = registered
            if extent > span.held:
                revived += extent - span.held
        new = -(-(hit_blocks * block + num_tokens) // block) - hit_blocks
        if new + revived + loaded > self.num_blocks - self.num_used_blocks - self.watermark_blocks:
            return None
        for span, extent in hits:
            span.holders[request] = extent
            if extent > span.registered:
                assert self.host is not None
                self.host.take(span, extent)
                span.registered = extent
            if extent > span.held:
                self._revive(span, extent)
        if hits:
            self._holding[request] = [span for span, _ in hits]
        self.num_used_blocks += revived + loaded
        self.num_evictable_blocks -= revived
        if loaded:
            # new blocks for the copies, from the free ones (evicting as any allocation does)
            self._allocated(loaded)
        self.last_loaded_tokens = loaded * block
        self.pending_loaded_tokens += loaded * block
        self.host_hit_tokens += loaded * block
        request.kv_slots = hit_blocks * block
        grown = self.grow(request, hit_blocks * block + num_tokens)
        assert grown is not None, "admit_cached: the room checked was not there"
        uncomputed = request.num_uncomputed_tokens
        self.looked_up_tokens += uncomputed
        self.hit_tokens += hit_blocks * block
        if request.prefix_groups:  # the full prompt blocks that could have been hits
            full = sum(map(itemgetter(1), request.prefix_groups))
            self.looked_up_blocks += min(full, (uncomputed - 1) // block)
        self.hit_blocks += hit_blocks
        return hit_blocks * block

    @staticmethod
    def _revive(span: _Span, upto: int) -> None:
        """Hold ``span``'s evictable blocks before ``upto`` again (its pieces lose them)."""
        pieces = span.pieces
        while len(pieces) > 1 and pieces[1][0] <= upto:
            del pieces[0]
        if pieces:
            if upto >= span.registered:
                pieces.clear()
            else:
                pieces[0][0] = max(pieces[0][0], upto)
        span.held = upto

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
        end = len(prefix)
        while at < end and computed > start:
            key, n = prefix[at]
            span = groups.get(key)
            if span is None:  # nobody computed this group before: register it and what follows
                at, start = self._register_new(request, at, start, computed)
                continue  # (from where that stopped: a group another request computed, or one
                # it computed in part, looked at again)
            upto = computed - start
            if upto > n:
                upto = n
            first = span.starts[key]
            registered = span.registered
            extent = span.holders.get(request, 0)
            mine = extent - first  # (of this group's blocks)
            if mine < 0:
                mine = 0
            elif mine > n:
                mine = n
            if upto > registered - first and extent == registered:
                # its own blocks after the registered ones become the registered ones (the
                # group is the span's last registered one: one before it is whole); copies in
                # host memory of them are dropped (recomputed, not loaded)
                self.registered_blocks += upto - (registered - first)
                span.registered = span.held = span.holders[request] = first + upto
                if self.host is not None:
                    self.host.take(span, first + upto, loaded=False)
                    if not extent:
                        # a span whose blocks were all in host memory: it holds it now
                        self._holding.setdefault(request, []).append(span)
                mine = upto
            elif upto > mine:
                at = end  # a copy of its own from here: no later block is a prefix
                break
            if mine < n:
                break  # the rest of this group is not computed yet
            at += 1
            start += n
        self._registered_upto[request] = (at, start)

    def _register_new(
        self, request: Request, at: int, start: int, computed: int
    ) -> tuple[int, int]:
        """Register ``request``'s groups from its ``at``-th (its block ``start``) up to its block
        ``computed``, while nobody computed them before it; return where it stopped. Their
        blocks are its own, after groups it holds whole: they join the last span it holds when
        it holds all of that span (which then ends with the group before them), else a new
        span."""
        prefix = request.prefix_groups
        assert prefix
        groups = self._groups
        holding = self._holding.get(request)
        if holding is None:
            holding = self._holding[request] = []
        span = holding[-1] if holding else None
        if (
            span is None
            or span.holders[request] < span.registered
            or (self.host is not None and self.host.end(span) > span.registered)
        ):  # (groups in host memory follow the registered ones there: not its to extend)
            span = _Span(request)
            holding.append(span)
        keys, starts = span.keys, span.starts
        extent = before = span.registered
        last = span.last
        end = len(prefix)
        while at < end and computed > start:
            key, n = prefix[at]
            if groups.setdefault(key, span) is not span:
                break  # another request computed this group: it is cached (in its span)
            keys.append(key)
            starts[key] = last = extent
            if computed - start < n:
                extent += computed - start
                break  # the rest of this group is not computed yet
            extent += n
            at += 1
            start += n
        span.last = last
        span.registered = span.held = span.holders[request] = extent
        self.registered_blocks += extent - before
        return at, start

    # -- allocation: evict least recently freed cached blocks when room runs out ---------------

    def _consume(self, count: int) -> None:
        """Take ``count`` blocks from the head of the free blocks, evicting the cached ones
        among them (with the free queue: every allocation; else only what room requires)."""
        lru = self._lru
        evicted = 0
        while count > 0:
            entry = lru[0]
            run, span, empty = entry
            if span is None:  # blocks that hold nothing cached
                if empty > count:
                    entry[2] = empty - count
                    break
                count -= empty
                lru.popleft()
                continue
            pieces = span.pieces
            if not pieces or pieces[-1][1] != run:
                lru.popleft()  # held again since it was freed
                continue
            start = pieces[-1][0]
            evict = span.registered - start
            if evict > count:
                evict = count
            span.registered -= evict
            count -= evict
            evicted += evict
            if self.host is not None:
                self.host.store(span, span.registered, evict)
            if span.registered == start:
                pieces.pop()
                lru.popleft()
            if span.registered <= span.last:
                self._forget_evicted(span)
        self.num_evictable_blocks -= evicted
        self.evicted_blocks += evicted

    def _forget_evicted(self, span: _Span) -> None:
        """Forget ``span``'s groups with no block left, registered or in host memory, the last
        first (all of them when the span has none left)."""
        keys, starts, groups = span.keys, span.starts, self._groups
        top = span.registered
        if self.host is not None:
            top = max(top, self.host.end(span))
        while keys and span.last >= top:
            key = keys.pop()
            del starts[key], groups[key]
            if keys:
                span.last = starts[keys[-1]]

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
        evictable, the others free. Its computed full blocks are registered first (its reply's,
        when its content covers them: the module docstring)."""
        if request.prefix_groups:
            self._register(request, request.num_computed_tokens // self.block_size)
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
        cached = 0
        for span in holding:
            cached += span.holders[request]
        if self.free_queue and held > cached:
            # its own blocks (its last prompt block, its output) are its table's tail
            lru.append([run, None, held - cached])
        freed = 0
        for span in reversed(holding):
            holders = span.holders
            del holders[request]
            still = max(holders.values()) if holders else 0
            if still < span.held:
                freed += span.held - still
                if span.pieces:
                    span.pieces.insert(0, [still, run])
                else:
                    span.pieces.append([still, run])
                span.held = still
                lru.append([run, span, 0])
        # its own blocks are freed, the cached ones nobody else holds become evictable
        self.num_used_blocks -= held - cached + freed
        self.num_evictable_blocks += freed
        assert self.num_used_blocks >= 0, "KV pool went negative"

    def take_loaded_tokens(self) -> int:
        """The tokens copied back from host memory since the last call (the step being
        planned pays their copy)."""
        loaded = self.pending_loaded_tokens
        self.pending_loaded_tokens = 0
        return loaded

    # -- what the base class names per block ---------------------------------------------------

    def blocks_of(self, request: Request) -> tuple[int, ...]:
        raise NotImplementedError("a prefix-caching cache counts blocks; it does not name them")

    def attach(self, request: Request, block_ids: object) -> None:
        raise NotImplementedError("a prefix-caching cache attaches cached prefixes itself")

    @property
    def num_cached_blocks(self) -> int:
        """Blocks registered (held or evictable)."""
        return sum(span.registered for span in set(self._groups.values()))

    def check(self, requests: Iterable[Request] | None = None) -> None:
        """Assert the accounting agrees with itself (for tests); with ``requests``, every
        request holding blocks, also that they hold exactly the blocks counted in use."""
        held_by_spans = 0
        evictable = 0
        spans = set(self._groups.values())
        for span in spans:
            assert list(span.starts) == span.keys, "the groups' keys disagree"
            starts = list(span.starts.values())
            assert starts[0] == 0 and starts == sorted(set(starts)), "groups out of order"
            top = span.registered
            if self.host is not None:
                top = max(top, self.host.end(span))
            assert starts[-1] == span.last < top, "a group without a cached block"
            assert all(self._groups[key] is span for key in span.starts), "a group lost"
            assert span.held == max(span.holders.values(), default=0), "held extent"
            assert 0 <= span.held <= span.registered, "held beyond the registered blocks"
            assert all(span.holders.values()), "a holder holding none of it"
            pieces = span.pieces
            if span.registered > span.held:
                assert pieces and pieces[0][0] == span.held, "evictable blocks without a piece"
            starts = [p[0] for p in pieces]
            assert starts == sorted(set(starts)), "pieces out of order"
            assert all(s < span.registered for s in starts), "an empty piece"
            runs = [p[1] for p in pieces]
            assert runs == sorted(runs, reverse=True), "older pieces must be at the tail"
            held_by_spans += span.held
            evictable += span.registered - span.held
        for request, holding in self._holding.items():
            assert holding, "an empty holding"
            assert len(set(holding)) == len(holding), "a span held twice"
            held = 0
            for span in holding:
                assert span in spans, "a held span left the cache"
                held += span.holders[request]
            assert held <= request.kv_slots // self.block_size, "more cached blocks than held"
        assert evictable == self.num_evictable_blocks, "evictable count disagrees"
        free = self.num_blocks - self.num_used_blocks
        assert 0 <= self.num_evictable_blocks <= free, "cached blocks beyond the free ones"
        if self.free_queue:
            empty = sum(entry[2] for entry in self._lru if entry[1] is None)
            assert empty + self.num_evictable_blocks == free, "the free queue lost blocks"
        if self.host is not None:
            self.host.check()
            for span in self.host.groups():
                assert span in spans, "host blocks of a span the cache forgot"
                assert self.host.start(span) == span.registered, "host range detached"
        if requests is not None:
            own = 0
            for request in requests:
                holding = self._holding.get(request, [])
                own += request.kv_slots // self.block_size
                own -= sum(span.holders[request] for span in holding)
            assert self.num_used_blocks == held_by_spans + own, "blocks in use disagree"
