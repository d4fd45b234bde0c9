"""The prefix cache (sim.engine.prefix_cache) under vLLM's scheduler, step by step: hits and
step shapes computed by hand, eviction and recompute, held blocks never evicted, and LRU
agreement with a per-block reference."""

from __future__ import annotations

import random
from collections import OrderedDict

import pytest

from sim.engine.prefix_cache import PrefixCachingKVCache
from sim.engine.request import COMPLETED, RUNNING, Request
from sim.engine.scheduler.vllm import VLLMScheduler
from tests.engine.scheduler.steps import prefills, shape, step


def cached_request(rid: int, prompt: int, output: int, groups: list[tuple[int, int]]) -> Request:
    request = Request(rid, 0.0, prompt, output)
    request.prefix_groups = groups
    return request


def run_to_completion(sched: VLLMScheduler, request: Request, now: float = 0.0) -> float:
    while request.status != COMPLETED:
        now += 1.0
        step(sched, now)
        sched.kv.check()
    return now


def test_three_requests_sharing_two_blocks_hit_and_compute_what_is_counted_by_hand():
    # blocks of 4 tokens; group 1 (key 11) is the shared system prompt, 2 blocks (tokens 0-7)
    kv = PrefixCachingKVCache(64, 4)
    sched = VLLMScheduler(kv, max_num_seqs=4, max_num_batched_tokens=64)
    a = cached_request(0, 10, 2, [(11, 2)])  # 2 full blocks, then 2 tokens of its own
    sched.add(a)
    plan, _ = step(sched, 1.0)
    assert prefills(plan) == [(0, 10)] and shape(plan) == (10, 0, 10 * 10, 0)
    assert a.cached_prompt_tokens == 0 and kv.num_cached_blocks == 2  # registered once computed

    b = cached_request(1, 13, 2, [(11, 2), (12, 1)])  # shares both blocks, 1 full block more
    sched.add(b)
    plan = sched.schedule()
    # b computes 13 - 8 = 5 tokens, attending to its 8 cached ones: Ap = 5 x (8 + 5)
    assert prefills(plan) == [(1, 5)] and shape(plan) == (5, 1, 5 * 13, 10 + 1)
    assert b.cached_prompt_tokens == 8 and b.num_computed_tokens == 8
    assert kv.num_used_blocks == 3 + 2  # a: 3 blocks, 2 of them shared with b; b: 2 of its own
    sched.on_step_end(plan)
    kv.check()

    c = cached_request(2, 8, 1, [(11, 2)])  # the whole prompt cached: its last block recomputed
    sched.add(c)
    plan = sched.schedule()
    assert (2, 4) in prefills(plan) and c.cached_prompt_tokens == 4
    sched.on_step_end(plan)
    for request in (a, b, c):
        run_to_completion(sched, request)
    summary = {k: getattr(kv, k) for k in ("looked_up_tokens", "hit_tokens", "hit_blocks")}
    assert summary == {"looked_up_tokens": 10 + 13 + 8, "hit_tokens": 8 + 4, "hit_blocks": 3}
    assert kv.looked_up_blocks == 2 + 3 + 1  # full prompt blocks, at most (prompt - 1) // 4
    # every block is free again; the three registered ones stay cached, evictable
    assert kv.num_used_blocks == 0 and kv.num_cached_blocks == 3 and kv.num_evictable_blocks == 3


def test_a_request_whose_prefix_was_evicted_recomputes_it():
    kv = PrefixCachingKVCache(8, 4)
    sched = VLLMScheduler(kv, max_num_seqs=1, max_num_batched_tokens=64)
    a = cached_request(0, 16, 1, [(21, 4)])
    sched.add(a)
    run_to_completion(sched, a)
    assert kv.num_evictable_blocks == 4  # cached, unheld
    filler = cached_request(1, 28, 1, [])  # needs 7 of the 8 blocks: 3 cached ones must go
    sched.add(filler)
    run_to_completion(sched, filler)
    assert kv.evicted_blocks == 3 and kv.num_cached_blocks == 1  # the tail went first
    b = cached_request(2, 16, 1, [(21, 4)])
    sched.add(b)
    plan = sched.schedule()
    assert prefills(plan) == [(2, 12)] and b.cached_prompt_tokens == 4  # only block 0 left


def test_a_cached_block_a_running_request_holds_is_never_evicted():
    kv = PrefixCachingKVCache(12, 4)
    sched = VLLMScheduler(kv, max_num_seqs=4, max_num_batched_tokens=64)
    done = cached_request(0, 16, 1, [(41, 4)])
    sched.add(done)
    run_to_completion(sched, done)  # its 4 blocks stay cached, unheld
    holder = cached_request(1, 16, 20, [(42, 4)])  # grows to 9 blocks
    hungry = cached_request(2, 12, 16, [])  # grows to 7 blocks: together 16 > 12
    sched.add(holder)
    sched.add(hungry)
    now = 0.0
    for _ in range(200):
        if holder.status == COMPLETED and hungry.status == COMPLETED:
            break
        now += 1.0
        step(sched, now)
        kv.check()
        group = kv._groups.get(42)
        if holder.status == RUNNING and holder.num_computed_tokens >= 16:  # it holds them
            assert group is not None and group.registered == 4 and group.held == 4
    assert holder.status == COMPLETED and hungry.status == COMPLETED
    # the unheld blocks went first, and only they: 41's were evicted, 42's never while held
    assert kv.evicted_blocks >= 1
    assert 41 not in kv._groups or kv._groups[41].registered < 4
    assert holder.num_preemptions + hungry.num_preemptions >= 1  # the pool did run out


def per_block_lru_reference(
    requests: list[tuple[int, int, list[tuple[int, int]]]], num_blocks: int, block: int
) -> tuple[list[int], int]:
    """What a per-block LRU prefix cache (vLLM's, blocks known by their prefix) finds when the
    requests run one after another: each request's hit blocks, and the blocks evicted."""
    lru: OrderedDict[tuple, None] = OrderedDict()  # unheld cached blocks, least recent first
    hits, evicted = [], 0
    for prompt, output, groups in requests:
        ids = [(tuple(k for k, _ in groups[: g + 1]), i) for g, (_, n) in enumerate(groups)
               for i in range(n)]  # fmt: skip
        limit = min(len(ids), (prompt - 1) // block)
        hit = 0
        while hit < limit and ids[hit] in lru:
            hit += 1
        for block_id in ids[:hit]:
            del lru[block_id]  # held again
        # the request at its largest holds all its blocks: the unheld cached ones must fit
        room = num_blocks - -(-(prompt + output) // block)
        while len(lru) > room:
            lru.popitem(last=False)
            evicted += 1
        for block_id in reversed(ids):  # freed tail first
            lru[block_id] = None
        hits.append(hit)
    return hits, evicted


@pytest.mark.parametrize("seed", range(6))
def test_one_request_at_a_time_the_cache_is_a_per_block_lru(seed):
    rng = random.Random(seed)
    block, num_blocks = 4, 60
    # prompts from a small tree of shared prefixes: groups of 1-3 blocks
    tree: list[list[tuple[int, int]]] = [[]]
    requests = []
    for _ in range(40):
        base = rng.choice(tree)
        groups = list(base[: rng.randint(0, len(base))])
        for _ in range(rng.randint(0, 3)):
            groups.append((rng.getrandbits(48), rng.randint(1, 3)))
        tree.append(groups)
        full = sum(n for _, n in groups)
        prompt = full * block + rng.randint(1 if not full else 0, 3)
        requests.append((prompt, rng.randint(1, 12), groups))
    expected_hits, expected_evicted = per_block_lru_reference(requests, num_blocks, block)

    kv = PrefixCachingKVCache(num_blocks, block)
    sched = VLLMScheduler(kv, max_num_seqs=1, max_num_batched_tokens=256)
    now, hits = 0.0, []
    for rid, (prompt, output, groups) in enumerate(requests):
        request = cached_request(rid, prompt, output, groups)
        sched.add(request)
        now = run_to_completion(sched, request, now)
        hits.append(request.cached_prompt_tokens // block)
    assert hits == expected_hits
    assert kv.evicted_blocks == expected_evicted
    assert sum(expected_hits) > 0 and expected_evicted > 0  # the scenario exercises both


@pytest.mark.parametrize("name", ["trtllm", "static"])
def test_schedulers_without_the_model_refuse_it_in_one_line(name):
    from sim.config.build import build
    from sim.errors import ConfigError
    from tests.support import compose

    cfg = compose(f"scheduler={name}", "kv.prefix_caching=true")
    with pytest.raises(ConfigError, match=r"^kv\.prefix_caching=True: not modelled"):
        build(cfg["scheduler"], "scheduler", kv=PrefixCachingKVCache(100, 16))


def test_concurrent_requests_keep_the_accounting_whole_and_all_complete():
    # many requests at once over shared prefixes, pools small enough for evictions and
    # preemptions: the cache's invariants hold at every step, every request completes once
    block = 4
    evicted = preempted = hits = 0
    for seed in range(8):
        rng = random.Random(seed)
        kv = PrefixCachingKVCache(rng.randint(24, 48), block, watermark=rng.choice([0.0, 0.05]))
        sched = VLLMScheduler(kv, max_num_seqs=rng.randint(2, 8), max_num_batched_tokens=32)
        prefixes = [[(rng.getrandbits(40), rng.randint(1, 3)) for _ in range(4)] for _ in range(3)]
        pending = []
        for rid in range(60):
            groups = prefixes[rng.randrange(3)][: rng.randint(0, 3)]
            groups += [(rng.getrandbits(40), rng.randint(1, 2))] * rng.randint(0, 1)
            full = sum(n for _, n in groups)
            prompt = full * block + rng.randint(1, 5)
            pending.append(cached_request(rid, prompt, rng.randint(1, 30), groups))
        requests = list(pending)
        finished: list[int] = []
        now = 0.0
        while (pending or sched.has_work) and now < 20_000:
            if pending and rng.random() < 0.5:
                sched.add(pending.pop(0))
            now += 1.0
            _, done = step(sched, now)
            finished += [r.request_id for r in done]
            kv.check()
            assert kv.num_used_blocks + kv.num_evictable_blocks <= kv.num_blocks
        assert sorted(finished) == list(range(60))  # each exactly once
        assert kv.num_used_blocks == 0
        evicted += kv.evicted_blocks
        hits += kv.hit_blocks
        preempted += sum(r.num_preemptions for r in requests)
    assert evicted > 0 and preempted > 0 and hits > 0  # the scenarios exercise all three
