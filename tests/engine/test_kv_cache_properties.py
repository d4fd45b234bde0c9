"""Properties of the paged KV cache, checked on random operation sequences against a small model.

Two groups:

- ``KVCacheMachine`` (a hypothesis state machine) runs random ``grow``, ``admit``, ``free``,
  ``blocks_of`` and ``attach`` calls on a tiny pool and a handful of requests, and keeps a plain
  model: how many blocks each request holds and which of them it knows by id. After every call:
  ``check()`` passes, ``num_used_blocks`` is the number of distinct blocks held (named ids counted
  once however many hold them, plus unnamed ones) and never exceeds the pool, ``kv_slots`` mirrors
  the blocks held, ``ref_count`` of every id is its number of holders by name, and without sharing
  the used count is the plain sum over requests. A ``None`` answer changed nothing; ``blocks_of``
  names distinct, in-range ids that no other request holds unless shared, and answers the same
  twice. At the end, freeing everything empties the pool and every id can be named again.

- ``decode_steps_that_fit`` and ``grow_decodes`` (a decode stretch worked out at once) against
  growing the same batch one token per step on a copy of the cache.
"""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, assume, event, given, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from sim.engine.kv_cache import KVCache
from sim.engine.request import Request
from sim.engine.step_time.base import VECTOR_MIN_STEPS

# The Hypothesis profile's count (tests/conftest.py): modest in the suite, more with make test-deep
MAX_EXAMPLES = settings.default.max_examples
SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

NUM_REQUESTS = 5


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# -- random operation sequences -------------------------------------------------------------


class KVCacheMachine(RuleBasedStateMachine):
    """A tiny pool, ``NUM_REQUESTS`` requests, and a model of what each holds.

    The model per request: ``held`` (blocks it holds) and ``names`` (the ids it is known to hold,
    in token order: what ``blocks_of`` last answered or what it attached; any blocks beyond them
    are held but not named yet, so the cache may give them any free id later).
    """

    @initialize(
        num_blocks=st.integers(1, 40),
        block_size=st.integers(1, 8),
        watermark=st.sampled_from([0.0, 0.1, 0.3]),
    )
    def make_pool(self, num_blocks, block_size, watermark):
        self.kv = KVCache(num_blocks, block_size, watermark)
        self.requests = [Request(i, 0.0, 1, 1) for i in range(NUM_REQUESTS)]
        self.held = [0] * NUM_REQUESTS
        self.names: list[list[int]] = [[] for _ in range(NUM_REQUESTS)]
        self.ever_shared = False

    # -- the model's view -------------------------------------------------------------------

    def holders_by_name(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for names in self.names:
            for block_id in names:
                counts[block_id] = counts.get(block_id, 0) + 1
        return counts

    def expected_used(self) -> int:
        named = set(self.holders_by_name())
        unnamed = sum(h - len(n) for h, n in zip(self.held, self.names, strict=True))
        return len(named) + unnamed

    def snapshot(self):
        """Everything observable without naming blocks (``blocks_of`` would change state)."""
        kv = self.kv
        return (
            kv.num_used_blocks,
            [r.kv_slots for r in self.requests],
            [kv.ref_count(b) for b in range(kv.num_blocks)],
        )

    def needed(self, i: int, num_tokens: int) -> int:
        return ceil_div(num_tokens, self.kv.block_size) - self.held[i]

    # -- operations ---------------------------------------------------------------------------

    @rule(i=st.integers(0, NUM_REQUESTS - 1), fraction=st.floats(0.0, 1.3))
    def grow(self, i, fraction):
        kv = self.kv
        # token counts up to a bit more than the pool holds, so shortages happen
        num_tokens = int(fraction * kv.capacity_tokens)
        needed, free = self.needed(i, num_tokens), kv.num_free_blocks
        before = self.snapshot()
        added = kv.grow(self.requests[i], num_tokens)
        if needed <= 0:
            assert added == 0  # never shrinks
        elif needed > free:
            assert added is None
            assert self.snapshot() == before, "grow answered None but changed something"
        else:
            assert added == needed
            self.held[i] += needed

    @rule(i=st.integers(0, NUM_REQUESTS - 1), fraction=st.floats(0.0, 1.3))
    def admit(self, i, fraction):
        kv = self.kv
        num_tokens = int(fraction * kv.capacity_tokens)
        needed, free = self.needed(i, num_tokens), kv.num_free_blocks
        before = self.snapshot()
        added = kv.admit(self.requests[i], num_tokens)
        if needed <= 0:
            # Nothing to add. (Inside the watermark, admit answers None when the request already
            # holds exactly enough and 0 when it holds more; schedulers only admit requests
            # holding nothing, so either answer is taken here, as long as nothing changes.)
            assert added in (0, None)
            assert self.snapshot() == before
        elif needed > free - kv.watermark_blocks:  # would dip into the kept-free blocks
            assert added is None
            assert self.snapshot() == before, "admit answered None but changed something"
        else:  # otherwise admit is grow
            assert added == needed
            self.held[i] += needed
            assert kv.num_free_blocks >= kv.watermark_blocks

    @rule(i=st.integers(0, NUM_REQUESTS - 1))
    def free(self, i):
        kv = self.kv
        refs_before = {b: kv.ref_count(b) for b in self.names[i]}
        kv.free(self.requests[i])
        for block_id, refs in refs_before.items():
            # one holder fewer; the id is free (0) only if this was the last holder
            assert kv.ref_count(block_id) == refs - 1
            if refs > 1:
                event("freed a block another request still holds")
        self.held[i] = 0
        self.names[i] = []
        assert self.requests[i].kv_slots == 0

    @rule(i=st.integers(0, NUM_REQUESTS - 1))
    def blocks_of(self, i):
        self.name_blocks(i)

    def name_blocks(self, i: int) -> list[int]:
        """``blocks_of`` request ``i``, checked against the model; the model then knows all."""
        kv = self.kv
        others = {b for j, names in enumerate(self.names) if j != i for b in names}
        ids = kv.blocks_of(self.requests[i])
        assert len(ids) == self.held[i]
        assert len(set(ids)) == len(ids), "a request holds an id twice"
        assert all(0 <= b < kv.num_blocks for b in ids)
        known = self.names[i]
        assert list(ids[: len(known)]) == known, "named blocks changed id or order"
        # newly named blocks come from the free ids: nobody else holds them
        assert not others.intersection(ids[len(known) :])
        assert kv.blocks_of(self.requests[i]) == ids, "a second call names other ids"
        self.names[i] = list(ids)
        return self.names[i]

    @rule(
        src=st.integers(0, NUM_REQUESTS - 1),
        dst=st.integers(0, NUM_REQUESTS - 1),
        length=st.integers(1, 40),
    )
    def attach(self, src, dst, length):
        """A request holding nothing starts with a prefix of another's blocks (named first, as
        a prefix cache would)."""
        kv = self.kv
        # Read the draws as "the next request, from there on, that can play the part" (a
        # precondition with dependent draws shrinks badly): the source holds blocks, the new
        # holder holds nothing.
        sources = [i for i, h in enumerate(self.held) if h]
        targets = [i for i, h in enumerate(self.held) if h == 0]
        if not sources or not targets:
            return
        src = min(sources, key=lambda i: (i - src) % NUM_REQUESTS)
        dst = min(targets, key=lambda i: (i - dst) % NUM_REQUESTS)
        length = min(length, len(self.name_blocks(src)))
        prefix = self.names[src][:length]
        note(f"attach: request {dst} starts with blocks {prefix} of request {src}")
        used_before = kv.num_used_blocks
        refs_before = [kv.ref_count(b) for b in prefix]
        kv.attach(self.requests[dst], prefix)
        # sharing takes no new blocks; each shared id gains one holder
        assert kv.num_used_blocks == used_before
        assert [kv.ref_count(b) for b in prefix] == [r + 1 for r in refs_before]
        self.held[dst] = length
        self.names[dst] = list(prefix)
        self.ever_shared = True
        event("attached")

    # -- after every operation ------------------------------------------------------------

    @invariant()
    def accounting_agrees(self):
        kv = self.kv
        kv.check()
        assert kv.num_used_blocks == self.expected_used()
        assert 0 <= kv.num_used_blocks <= kv.num_blocks
        for request, held in zip(self.requests, self.held, strict=True):
            assert request.kv_slots == held * kv.block_size
        if not self.ever_shared:
            assert kv.num_used_blocks == sum(r.kv_slots // kv.block_size for r in self.requests)
        holders = self.holders_by_name()
        for block_id in range(kv.num_blocks):
            assert kv.ref_count(block_id) == holders.get(block_id, 0), block_id

    def teardown(self):
        kv = getattr(self, "kv", None)
        if kv is None:
            return
        for request in self.requests:
            kv.free(request)
        kv.check()
        assert kv.num_used_blocks == 0 and kv.num_free_blocks == kv.num_blocks
        assert all(kv.ref_count(b) == 0 for b in range(kv.num_blocks))
        # every id is free again: one request can take the whole pool and name all of them
        whole = Request(99, 0.0, 1, 1)
        assert kv.grow(whole, kv.capacity_tokens) == kv.num_blocks
        assert sorted(kv.blocks_of(whole)) == list(range(kv.num_blocks))
        kv.check()


KVCacheMachine.TestCase.settings = settings(SETTINGS, stateful_step_count=40)
TestKVCacheOperations = KVCacheMachine.TestCase


# -- decode stretches against stepping one by one -------------------------------------------


@st.composite
def decoding_batches(draw):
    """A pool and a batch of decoding requests, each holding KV for at least its computed
    tokens (some exactly that many, so its very next token needs a block), plus a bystander
    holding part of the pool so it runs short."""
    block_size = draw(st.integers(1, 8))
    # big pools too, so that stretches of VECTOR_MIN_STEPS or more (the numpy path) fit
    num_blocks = draw(st.integers(1, 40) | st.integers(40, 400))
    kv = KVCache(num_blocks, block_size)
    bystander = Request(100, 0.0, 1, 1)
    kv.grow(bystander, int(draw(st.floats(0.0, 1.0)) * num_blocks) * block_size)
    decodes = []
    for rid in range(draw(st.integers(1, 6))):
        r = Request(rid, 0.0, 1, 1000)
        computed = draw(st.integers(1, 60))
        spare = draw(st.integers(0, 2 * block_size))  # slots beyond the computed tokens
        if kv.grow(r, computed + spare) is None:
            continue
        r.num_computed_tokens = computed
        decodes.append(r)
    assume(decodes)
    return kv, decodes


def step_one_by_one(kv: KVCache, decodes: list[Request], max_steps: int) -> list[int]:
    """Grow every request by one token per step, as a scheduler does before each decode step,
    until ``max_steps`` or the pool runs out; return the blocks in use during each step that
    fit. Works on whatever it is given (pass a copy)."""
    used = []
    for _ in range(max_steps):
        if any(kv.grow(r, r.num_computed_tokens + 1) is None for r in decodes):
            break  # this step does not fit (a partial grow is fine: this is a copy)
        used.append(kv.num_used_blocks)  # the blocks in use while the step runs
        for r in decodes:
            r.num_computed_tokens += 1  # what on_step_end does after the step
    return used


@SETTINGS
@given(
    batch=decoding_batches(),
    # half the draws at VECTOR_MIN_STEPS or more, where grow_decodes switches to numpy
    max_steps=st.integers(1, VECTOR_MIN_STEPS - 1) | st.integers(VECTOR_MIN_STEPS, 200),
    data=st.data(),
)
def test_decode_stretch_equals_growing_one_step_at_a_time(batch, max_steps, data):
    kv, decodes = batch
    # two copies before anything grows: one steps as far as it can, one replays the stretch
    slow_kv, slow_decodes = copy.deepcopy((kv, decodes))
    replay_kv, replay_decodes = copy.deepcopy((kv, decodes))
    slow_used = step_one_by_one(slow_kv, slow_decodes, max_steps)

    k = kv.decode_steps_that_fit(decodes, max_steps)
    # The largest stretch that fits, never past max_steps. Its floor is 1: the caller (a
    # scheduler) has already grown the first step's blocks when it asks, so when even the first
    # step does not fit here, that precondition is what fails, not the answer.
    assert k == max(len(slow_used), 1)
    assume(slow_used)
    event("the pool cuts the stretch" if k < max_steps else "max_steps cuts the stretch")

    # A stretch may stop early (an arrival cuts it), so any length up to k must agree too.
    num_steps = data.draw(st.just(k) | st.integers(1, k), "num_steps")
    fast_used = kv.grow_decodes(decodes, num_steps)
    if num_steps >= VECTOR_MIN_STEPS:
        assert not isinstance(fast_used, list)  # the numpy path was taken
        event("numpy path")
    assert [int(b) for b in fast_used] == slow_used[:num_steps]

    # The state after the stretch equals the state after num_steps single steps.
    assert len(step_one_by_one(replay_kv, replay_decodes, num_steps)) == num_steps
    assert [r.kv_slots for r in decodes] == [r.kv_slots for r in replay_decodes]
    assert kv.num_used_blocks == replay_kv.num_used_blocks
    kv.check()
