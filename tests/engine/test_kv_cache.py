"""The paged KV cache: exact block counts on tiny pools, None for a shortage, clear refusals."""

import pytest

from sim.engine.kv_cache import KVCache
from sim.engine.request import Request
from sim.errors import ConfigError


def req(prompt=8, output=4, rid=0) -> Request:
    return Request(rid, 0.0, prompt, output)


def test_empty_pool_numbers():
    kv = KVCache(10, 4)
    assert kv.num_free_blocks == 10
    assert kv.num_used_blocks == 0
    assert kv.capacity_tokens == 40
    assert kv.watermark_blocks == 0
    assert [kv.blocks_for(n) for n in (0, 1, 4, 5, 8, 9, 40)] == [0, 1, 1, 2, 2, 3, 10]


def test_grow_returns_blocks_added_and_only_what_is_new():
    kv = KVCache(10, 4)
    r = req()
    assert kv.grow(r, 5) == 2  # ceil(5/4)
    assert (len(kv.blocks_of(r)), kv.num_used_blocks, kv.num_free_blocks) == (2, 2, 8)
    assert kv.grow(r, 8) == 0  # still fits in 2 blocks
    assert kv.grow(r, 3) == 0  # never shrinks
    assert len(kv.blocks_of(r)) == 2
    assert kv.grow(r, 9) == 1
    assert (len(kv.blocks_of(r)), kv.num_used_blocks) == (3, 3)


def test_grow_none_when_short_changes_nothing():
    kv = KVCache(10, 4)
    a, b = req(rid=0), req(rid=1)
    assert kv.grow(a, 28) == 7
    assert kv.grow(b, 13) is None  # needs 4 blocks, 3 free
    assert (len(kv.blocks_of(b)), len(kv.blocks_of(a)), kv.num_used_blocks) == (0, 7, 7)
    assert kv.grow(b, 12) == 3  # exactly the rest
    assert kv.num_free_blocks == 0
    assert kv.grow(b, 13) is None
    assert (len(kv.blocks_of(b)), kv.num_used_blocks) == (3, 10)


def test_admit_keeps_the_watermark_free():
    kv = KVCache(10, 4, watermark=0.15)  # ceil(1.5) = 2 blocks kept free on admission
    assert kv.watermark_blocks == 2
    a, b, c = req(rid=0), req(rid=1), req(rid=2)
    assert kv.admit(a, 32) == 8  # 8 + 2 kept = 10: exactly allowed
    assert kv.admit(b, 1) is None  # would dip into the watermark
    assert (len(kv.blocks_of(b)), kv.num_used_blocks) == (0, 8)
    # A running request may grow into the watermark.
    assert kv.grow(a, 36) == 1
    assert kv.num_used_blocks == 9
    assert kv.admit(c, 1) is None


def test_watermark_rounds_up():
    assert KVCache(10, 4, watermark=0.01).watermark_blocks == 1
    assert KVCache(100, 4, watermark=0.01).watermark_blocks == 1
    assert KVCache(101, 4, watermark=0.01).watermark_blocks == 2
    assert KVCache(10, 4, watermark=0.0).watermark_blocks == 0


def test_admit_counts_blocks_already_held():
    kv = KVCache(10, 4, watermark=0.2)  # 2 kept free
    r = req()
    assert kv.admit(r, 16) == 4
    # Re-admitting for 32 tokens needs only 4 more: 8 used + 2 watermark = 10.
    assert kv.admit(r, 32) == 4
    assert kv.num_used_blocks == 8


def test_free_returns_every_block():
    kv = KVCache(10, 4)
    a, b = req(rid=0), req(rid=1)
    kv.grow(a, 10)
    kv.grow(b, 20)
    assert kv.num_used_blocks == 8
    kv.free(a)
    assert (len(kv.blocks_of(a)), kv.num_used_blocks, kv.num_free_blocks) == (0, 5, 5)
    kv.free(a)  # freeing twice frees nothing more
    assert kv.num_used_blocks == 5
    kv.free(b)
    assert kv.num_used_blocks == 0
    assert kv.grow(a, 40) == 10


def test_can_ever_hold_respects_watermark():
    kv = KVCache(10, 4)
    assert kv.can_ever_hold(40)
    assert not kv.can_ever_hold(41)
    kv = KVCache(10, 4, watermark=0.15)  # 2 blocks never given to an admission
    assert kv.can_ever_hold(32)
    assert not kv.can_ever_hold(33)
    # It is about an empty pool, not the current state.
    other = req()
    kv.grow(other, 40)
    assert kv.can_ever_hold(32)


@pytest.mark.parametrize(
    "args, field",
    [
        ((0, 4), "kv.num_blocks"),
        ((-3, 4), "kv.num_blocks"),
        ((10, 0), "kv.block_size"),
        ((10, 4, -0.1), "kv.watermark"),
        ((10, 4, 1.0), "kv.watermark"),
    ],
)
def test_bad_constructor_args_name_the_field(args, field):
    with pytest.raises(ConfigError) as err:
        KVCache(*args)
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}=")
    assert "\n" not in str(err.value)


def test_kv_slots_track_blocks_through_grow_stretch_and_free():
    from sim.engine.request import Request

    kv = KVCache(num_blocks=20, block_size=4)
    a, b = Request(0, 0.0, 5, 50), Request(1, 0.0, 3, 50)
    kv.grow(a, 6)  # 2 blocks
    kv.grow(b, 4)  # 1 block
    for r in (a, b):
        assert r.kv_slots == len(kv.blocks_of(r)) * 4
    a.num_computed_tokens, b.num_computed_tokens = 5, 3
    # a decode stretch of 9 steps: a reaches 14 tokens (4 blocks), b 12 tokens (3 blocks)
    assert kv.decode_steps_that_fit([a, b], 9) == 9
    used = kv.grow_decodes([a, b], 9)
    assert (len(kv.blocks_of(a)), len(kv.blocks_of(b))) == (4, 3)
    assert [r.kv_slots for r in (a, b)] == [16, 12]
    # blocks in use at each step: a needs blocks at steps 4 and 8, b at steps 2, 6
    assert list(used) == [3, 4, 4, 5, 5, 6, 6, 7, 7]
    assert kv.num_used_blocks == 7
    kv.free(a)
    assert (len(kv.blocks_of(a)), a.kv_slots, kv.num_used_blocks) == (0, 0, 3)


def test_decode_steps_that_fit_stops_before_the_pool_runs_out():
    from sim.engine.request import Request

    kv = KVCache(num_blocks=5, block_size=4)
    a, b = Request(0, 0.0, 4, 50), Request(1, 0.0, 4, 50)
    kv.grow(a, 5)
    kv.grow(b, 5)  # 2 blocks each, 1 free; both have computed 4 tokens
    a.num_computed_tokens = b.num_computed_tokens = 4
    # steps 1-4 fit in held blocks (tokens 5..8); step 5 needs 2 new blocks, only 1 is free
    assert kv.decode_steps_that_fit([a, b], 20) == 4


def test_blocks_are_named_on_demand_lowest_id_first_and_shared_until_the_last_holder():
    kv = KVCache(num_blocks=6, block_size=4)
    a, b = Request(0, 0.0, 8, 4), Request(1, 0.0, 8, 4)
    kv.grow(a, 10)  # 3 blocks, counted, not named yet
    assert (kv.num_used_blocks, kv.ref_count(0)) == (3, 0)
    assert kv.blocks_of(a) == (0, 1, 2) and kv.ref_count(0) == 1
    kv.attach(b, (0, 1))  # b starts with a's first two blocks
    assert (kv.num_used_blocks, b.kv_slots, kv.ref_count(1), kv.ref_count(2)) == (3, 8, 2, 1)
    kv.grow(b, 12)  # one block of its own, unnamed
    assert kv.num_used_blocks == 4 and kv.blocks_of(b) == (0, 1, 3)
    kv.check()
    kv.free(a)  # block 2 goes back; 0 and 1 stay with b
    assert (kv.num_used_blocks, kv.ref_count(0), kv.ref_count(2)) == (3, 1, 0)
    kv.free(b)
    assert kv.num_used_blocks == 0 and all(kv.ref_count(i) == 0 for i in range(6))
    kv.check()
