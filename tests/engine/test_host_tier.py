"""The host tier alone (sim.engine.host_tier): ranges per group, least recently stored evicted
first, block by block, against a per-block reference."""

from __future__ import annotations

import random
from collections import OrderedDict

import pytest

from sim.engine.host_tier import HostTier


class Group:
    """A stand-in for the prefix cache's group (identity is all the tier uses)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


def test_stored_blocks_are_evicted_least_recently_stored_first_tail_first():
    forgotten: list[Group] = []
    tier = HostTier(6, forgotten.append)
    a, b, c, d, e = (Group(name) for name in "abcde")
    tier.store(a, 4, 2)  # a's blocks 4, 5 (the GPU kept 0..3)
    tier.store(b, 0, 3)
    # a's 2, 3 next: one block short, so the oldest stored goes, a's 5 (its piece's tail)
    tier.store(a, 2, 2)
    assert (tier.end(a), tier.end(b), tier.num_used_blocks, tier.evicted_blocks) == (5, 3, 6, 1)
    tier.check()
    assert forgotten == []  # (a was being stored)
    tier.store(c, 0, 1)  # a's 4: the rest of the oldest piece
    assert (tier.end(a), tier.evicted_blocks) == (4, 2)
    assert forgotten == [a]  # told each time a range shortens
    tier.store(d, 0, 2)  # b's 2 and 1, tail first
    assert (tier.end(a), tier.end(b), tier.evicted_blocks) == (4, 1, 4)
    assert forgotten == [a, b]
    tier.check()
    tier.store(e, 0, 3)  # b's last block, then a's newer piece (2, 3)
    assert (tier.end(a), tier.end(b), tier.evicted_blocks) == (0, 0, 7)
    assert forgotten == [a, b, b, a]
    assert (tier.end(c), tier.end(d), tier.end(e), tier.num_used_blocks) == (1, 2, 3, 6)
    assert tier.stored_blocks == 13
    tier.check()


def test_take_drops_the_front_and_counts_loads():
    tier = HostTier(10, lambda g: None)
    a = Group("a")
    tier.store(a, 6, 2)
    tier.store(a, 3, 3)  # range 3..7, pieces [3, 6) newer, [6, 8) older
    assert tier.take(a, 2) == 0  # nothing below 3
    assert tier.take(a, 5) == 2  # 3, 4 back on the GPU
    assert tier.end(a) == 8 and tier.loaded_blocks == 2 and tier.num_used_blocks == 3
    tier.check()
    assert tier.take(a, 7, loaded=False) == 2  # recomputed, not loaded
    assert tier.loaded_blocks == 2 and tier.num_used_blocks == 1
    assert tier.take(a, 100) == 1 and tier.end(a) == 0
    tier.check()


def test_more_than_the_tier_keeps_the_front():
    tier = HostTier(4, lambda g: None)
    a, b = Group("a"), Group("b")
    tier.store(b, 0, 2)
    tier.store(a, 0, 10)
    assert tier.end(a) == 4 and tier.end(b) == 0 and tier.num_used_blocks == 4
    tier.check()


@pytest.mark.parametrize("seed", range(10))
def test_eviction_matches_a_per_block_lru(seed):
    """Random stores (each group's next one the blocks just before its host range, as the GPU
    evicts a group tail first) and takes (blocks back on the GPU): the tier holds exactly the
    blocks a per-block LRU by store time holds, a store's tail counting as its oldest."""
    rnd = random.Random(seed)
    capacity = rnd.randint(3, 30)
    tier = HostTier(capacity, lambda g: None)
    groups = [Group(str(i)) for i in range(4)]
    gpu_extent = {g: rnd.randint(5, 40) for g in groups}
    reference: OrderedDict[tuple[Group, int], None] = OrderedDict()  # oldest first
    for _ in range(300):
        g = rnd.choice(groups)
        if rnd.random() < 0.7 and gpu_extent[g] > 0:
            count = rnd.randint(1, min(gpu_extent[g], 8))
            start = gpu_extent[g] - count
            tier.store(g, start, count)
            gpu_extent[g] = start
            for block in reversed(range(start, start + count)):
                reference[(g, block)] = None
            while len(reference) > capacity:
                reference.popitem(last=False)
        else:
            upto = gpu_extent[g] + rnd.randint(0, 6)
            tier.take(g, upto)
            for block in range(gpu_extent[g], upto):
                reference.pop((g, block), None)
            gpu_extent[g] = upto
        tier.check()
        held = {(g, b) for g in groups for b in range(gpu_extent[g], tier.end(g))}
        assert held == set(reference)
        assert tier.num_used_blocks == len(reference)
