"""The prefix cache (sim.engine.prefix_cache) under vLLM's scheduler, step by step: hits and
step shapes computed by hand, eviction and recompute, held blocks never evicted, and LRU
agreement with a per-block reference."""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Container

import pytest

from sim.engine.prefix_cache import PrefixCachingKVCache
from sim.engine.request import COMPLETED, RUNNING, Request
from sim.engine.scheduler.vllm import VLLMScheduler
from sim.engine.step_shape import StepShape
from sim.engine.step_time.base import HostLoadStepTime
from sim.engine.step_time.constant import ConstantStepTime
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


def _block_ids(groups: list[tuple[int, int]]) -> list[tuple]:
    """Each full prompt block, known by its group chain and its place in its group."""
    return [
        (tuple(key for key, _ in groups[: g + 1]), i)
        for g, (_, n) in enumerate(groups)
        for i in range(n)
    ]


def _leading_hits(ids: list[tuple], prompt: int, block: int, cached: Container) -> int:
    """How many leading blocks are cached, leaving at least one prompt token to compute."""
    limit = min(len(ids), (prompt - 1) // block)
    hit = 0
    while hit < limit and ids[hit] in cached:
        hit += 1
    return hit


def free_queue_reference(
    requests: list[tuple[int, int, list[tuple[int, int]]]], num_blocks: int, block: int
) -> tuple[list[int], int]:
    """vLLM v1's BlockPool, block by block, requests one after another: one queue of every
    free block, cached or not; an allocation pops the head (evicting it if cached); a hit takes
    its blocks out of the queue; a finished request's blocks go to the tail, last block first.
    Each request's hit blocks, and the cached blocks evicted."""
    queue: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))
    content: dict[int, tuple] = {}  # block id -> what it caches
    cached: dict[tuple, int] = {}  # what is cached -> its block
    hits, evicted = [], 0
    for prompt, output, groups in requests:
        ids = _block_ids(groups)
        hit = _leading_hits(ids, prompt, block, cached)
        table = [cached[i] for i in ids[:hit]]
        for block_id in table:
            del queue[block_id]
        # the last sampled token is never computed: the KV peaks at prompt + output - 1 tokens
        for _ in range(-(-(prompt + output - 1) // block) - hit):
            block_id, _ = queue.popitem(last=False)
            if block_id in content:
                del cached[content.pop(block_id)]
                evicted += 1
            table.append(block_id)
        for j in range(hit, len(ids)):  # its own full prompt blocks are cached
            content[table[j]] = ids[j]
            cached[ids[j]] = table[j]
        for block_id in reversed(table):
            queue[block_id] = None
        hits.append(hit)
    return hits, evicted


def when_full_reference(
    requests: list[tuple[int, int, list[tuple[int, int]]]], num_blocks: int, block: int
) -> tuple[list[int], int]:
    """A cache that evicts the least recently freed cached block only when it needs the room
    (SGLang's radix cache), block by block, requests one after another."""
    lru: OrderedDict[tuple, None] = OrderedDict()  # unheld cached blocks, least recent first
    hits, evicted = [], 0
    for prompt, output, groups in requests:
        ids = _block_ids(groups)
        hit = _leading_hits(ids, prompt, block, lru)
        for block_id in ids[:hit]:
            del lru[block_id]  # held again
        # at its largest the request holds prompt + output - 1 tokens: the rest is the room
        room = num_blocks - -(-(prompt + output - 1) // block)
        while len(lru) > room:
            lru.popitem(last=False)
            evicted += 1
        for block_id in reversed(ids):  # freed last block first
            lru[block_id] = None
        hits.append(hit)
    return hits, evicted


def prefix_tree_requests(seed: int, block: int) -> list[tuple[int, int, list[tuple[int, int]]]]:
    """40 prompts over a random tree of shared prefixes (groups of 1-3 blocks), each ending
    in a partial block (so a hit never makes a request recompute a cached block)."""
    rng = random.Random(seed)
    tree: list[list[tuple[int, int]]] = [[]]
    requests = []
    for _ in range(40):
        base = rng.choice(tree)
        groups = list(base[: rng.randint(0, len(base))])
        for _ in range(rng.randint(0, 3)):
            groups.append((rng.getrandbits(48), rng.randint(1, 3)))
        tree.append(groups)
        full = sum(n for _, n in groups)
        requests.append((full * block + rng.randint(1, block - 1), rng.randint(1, 12), groups))
    return requests


@pytest.mark.parametrize("free_queue", [True, False], ids=["free_queue", "when_full"])
@pytest.mark.parametrize("budget", [256, 6], ids=["whole", "chunked"])
def test_one_request_at_a_time_hits_and_evictions_equal_the_per_block_reference(free_queue, budget):
    block, num_blocks = 4, 60
    reference = free_queue_reference if free_queue else when_full_reference
    total_hits = total_evicted = 0
    for seed in range(20):
        requests = prefix_tree_requests(seed, block)
        expected_hits, expected_evicted = reference(requests, num_blocks, block)
        kv = PrefixCachingKVCache(num_blocks, block, free_queue=free_queue)
        sched = VLLMScheduler(kv, max_num_seqs=1, max_num_batched_tokens=budget)
        now, hits = 0.0, []
        for rid, (prompt, output, groups) in enumerate(requests):
            request = cached_request(rid, prompt, output, groups)
            sched.add(request)
            while request.status != COMPLETED:
                now += 1.0
                step(sched, now)
                kv.check(sched.running)
            hits.append(request.cached_prompt_tokens // block)
        assert hits == expected_hits, seed
        assert kv.evicted_blocks == expected_evicted, seed
        total_hits += sum(hits)
        total_evicted += expected_evicted
    assert total_hits > 0 and total_evicted > 0  # the scenarios exercise both


@pytest.mark.parametrize("name", ["trtllm", "static"])
def test_schedulers_without_the_model_refuse_it_in_one_line(name):
    from sim.config.build import build
    from sim.errors import ConfigError
    from tests.support import compose

    cfg = compose(f"scheduler={name}", "kv.prefix_caching=true")
    with pytest.raises(ConfigError, match=r"^kv\.prefix_caching=True: not modelled"):
        build(cfg["scheduler"], "scheduler", kv=PrefixCachingKVCache(100, 16))


def _scheduler(kind: str, kv: PrefixCachingKVCache, rng: random.Random):
    from sim.engine.scheduler.prefill_first import PrefillFirstScheduler
    from sim.engine.scheduler.sarathi import SarathiScheduler
    from sim.engine.scheduler.sglang import SGLangScheduler

    seqs = rng.randint(2, 8)
    if kind == "vllm":
        return VLLMScheduler(kv, max_num_seqs=seqs, max_num_batched_tokens=rng.choice([8, 32]))
    if kind == "sarathi":
        return SarathiScheduler(kv, chunk_size=8, max_num_seqs=seqs, max_num_batched_tokens=64)
    if kind == "prefill_first":
        return PrefillFirstScheduler(kv, max_num_seqs=seqs, max_num_batched_tokens=256)
    return SGLangScheduler(kv, max_running_requests=seqs, chunked_prefill_size=16)


@pytest.mark.parametrize("kind", ["vllm", "sarathi", "prefill_first", "sglang"])
@pytest.mark.parametrize("free_queue", [True, False], ids=["free_queue", "when_full"])
@pytest.mark.parametrize("host_blocks", [0, 12], ids=["gpu", "host"])
def test_concurrent_requests_keep_the_accounting_exact_and_all_complete(
    kind, free_queue, host_blocks
):
    # many requests at once over shared prefixes, some whose content runs on into their reply
    # (a conversation: a later prompt resends it), pools small enough for evictions and
    # preemptions, with or without a host tier: the accounting is exact at every step (blocks
    # in use are the held cached ones plus each request's own; host blocks follow the
    # registered ones), the steps carry every token copied back, and every request completes
    # exactly once
    block = 4
    evicted = preempted = hits = loaded = 0
    for seed in range(12):
        rng = random.Random(seed)
        kv = PrefixCachingKVCache(
            rng.randint(24, 48),
            block,
            rng.choice([0.0, 0.05]),
            free_queue=free_queue,
            host_blocks=host_blocks,
        )
        sched = _scheduler(kind, kv, rng)
        prefixes = [[(rng.getrandbits(40), rng.randint(1, 3)) for _ in range(4)] for _ in range(3)]
        pending = []
        for rid in range(50):
            chain = prefixes[rng.randrange(3)]
            if rng.random() < 0.3:  # a turn whose reply is the chain's next group
                groups = chain[: rng.randint(2, 4)]
                prompt = sum(n for _, n in groups[:-1]) * block + rng.randint(0, block - 1)
                reply = groups[-1][1] * block + block
                pending.append(cached_request(rid, prompt, rng.randint(reply, 30), groups))
                continue
            groups = chain[: rng.randint(0, 3)]
            groups += [(rng.getrandbits(40), rng.randint(1, 2))] * rng.randint(0, 1)
            if groups and rng.random() < 0.4:  # a prompt that ends inside its last group
                key, n = groups[-1]
                groups[-1] = (key, rng.randint(1, n))
            prompt = sum(n for _, n in groups) * block + rng.randint(0, block - 1)
            pending.append(cached_request(rid, max(prompt, 1), rng.randint(1, 30), groups))
        requests = list(pending)
        finished: list[int] = []
        now = 0.0
        while (pending or sched.has_work) and now < 20_000:
            if pending and rng.random() < 0.5:
                sched.add(pending.pop(0))
            now += 1.0
            plan = sched.schedule()
            copied = kv.take_loaded_tokens()
            assert copied % block == 0 and (not copied or plan.prefills)
            loaded += copied // block
            steps = sched.decode_stretch_limit(plan) if plan.is_pure_decode else 1
            if steps > 1:  # a decode stretch, cut short at random as an arrival would
                done, _ = sched.advance_decodes(plan, rng.randint(1, steps))
            else:
                _, done = sched.on_step_end(plan)
            finished += [r.request_id for r in done]
            kv.check(sched.running)
        assert sorted(finished) == list(range(50))  # each exactly once
        assert kv.num_used_blocks == 0
        assert not kv._holding and not kv._registered_upto  # nothing left of the requests
        evicted += kv.evicted_blocks
        hits += kv.hit_blocks
        preempted += sum(r.num_preemptions for r in requests)
        if kv.host is not None:
            assert kv.host.loaded_blocks * block == kv.host_hit_tokens
            assert kv.host.num_used_blocks <= host_blocks
    assert evicted > 0 and hits > 0  # the scenarios exercise both
    assert (loaded > 0) == bool(host_blocks)
    if kind != "prefill_first":
        assert preempted > 0


@pytest.mark.parametrize("free_queue", [True, False], ids=["free_queue", "when_full"])
def test_holders_of_different_lengths_leave_pieces_that_are_held_again_in_order(free_queue):
    # a holds all 3 blocks of group 7, b only its first (its prompt ends there); a ends first,
    # then b: the group's evictable blocks come in two pieces, [1, 3) freed before [0, 1)
    kv = PrefixCachingKVCache(64, 4, free_queue=free_queue)
    sched = VLLMScheduler(kv, max_num_seqs=4, max_num_batched_tokens=64)
    a = cached_request(0, 13, 2, [(7, 3)])
    sched.add(a)
    step(sched, 1.0)
    b = cached_request(1, 6, 6, [(7, 1)])
    sched.add(b)
    now = 1.0
    while a.status != COMPLETED or b.status != COMPLETED:
        now += 1.0
        step(sched, now)
        kv.check(sched.running)
    group = kv._groups[7]
    assert (group.registered, group.held) == (3, 0)
    assert [start for start, _ in group.pieces] == [0, 1]  # b's block freed last: the head
    # c holds exactly the first piece again: the second stays, the only evictable blocks
    c = cached_request(2, 6, 30, [(7, 1)])
    sched.add(c)
    step(sched, now + 1.0)
    kv.check(sched.running)
    assert c.cached_prompt_tokens == 4
    assert [start for start, _ in group.pieces] == [1] and group.held == 1
    assert kv.num_evictable_blocks == 2


def test_sglang_counts_a_prefix_it_holds_again_out_of_its_admission_budget():
    # SGLang's rem_total_tokens is available + evictable tokens: admitting r1 holds its 60
    # cached tokens again, so they leave the evictable ones and r2 (30 + 5 tokens) no longer
    # fits beside it (100 - 61 - 7 reserved = 32 < 36); it waits for the next batch
    from sim.engine.scheduler.sglang import SGLangScheduler

    kv = PrefixCachingKVCache(100, 1, free_queue=False)
    sched = SGLangScheduler(kv, max_running_requests=8, max_prefill_tokens=1000)
    first = cached_request(0, 61, 2, [(5, 60)])
    sched.add(first)
    run_to_completion(sched, first)
    assert kv.num_evictable_blocks == 60
    r1 = cached_request(1, 61, 5, [(5, 60)])
    r2 = cached_request(2, 30, 5, [])
    sched.add(r1)
    sched.add(r2)
    plan = sched.schedule()
    assert prefills(plan) == [(1, 1)] and r1.cached_prompt_tokens == 60


# --- the host tier (kv.cpu_offload_gib) -------------------------------------------------------


@pytest.mark.parametrize(("host_blocks", "loaded"), [(8, 3), (2, 2)], ids=["room", "short"])
def test_an_evicted_prefix_comes_back_from_host_memory_and_the_step_pays_the_copy(
    host_blocks, loaded
):
    """6 blocks of 4 tokens. a (13 tokens) registers 3 blocks; b (24 tokens, nothing shared)
    takes every block, evicting them to host memory; c (a's 3 blocks, then 2 tokens) copies
    them back and computes 2 tokens. A host tier of 2 blocks kept the first 2 (a lookup's
    first): c copies those and recomputes the third."""
    kv = PrefixCachingKVCache(6, 4, host_blocks=host_blocks)
    sched = VLLMScheduler(kv, max_num_seqs=4, max_num_batched_tokens=64)
    a = cached_request(0, 13, 1, [(11, 3)])
    sched.add(a)
    run_to_completion(sched, a)
    assert kv.num_cached_blocks == 3 and kv.take_loaded_tokens() == 0
    b = cached_request(1, 24, 1, [])
    sched.add(b)
    run_to_completion(sched, b, 10.0)
    assert kv.num_cached_blocks == 0 and kv.evicted_blocks == 3
    assert kv.host is not None  # (it keeps what fits: a lookup's first blocks)
    assert kv.host.stored_blocks == kv.host.num_used_blocks == min(3, host_blocks)
    c = cached_request(2, 14, 1, [(11, 3)])
    sched.add(c)
    plan = sched.schedule()
    assert kv.take_loaded_tokens() == loaded * 4 and kv.take_loaded_tokens() == 0
    assert prefills(plan) == [(2, 14 - loaded * 4)]
    assert c.cached_prompt_tokens == c.host_cached_prompt_tokens == loaded * 4
    assert kv.host.loaded_blocks == loaded and kv.host.num_used_blocks == 0
    assert kv.host_hit_tokens == loaded * 4 == kv.hit_tokens
    kv.check([c])
    sched.on_step_end(plan)
    kv.check()
    # registered again on the GPU: the next request finds all 3 there, nothing to copy
    d = cached_request(3, 14, 1, [(11, 3)])
    sched.add(d)
    sched.schedule()
    assert d.cached_prompt_tokens == 12 and d.host_cached_prompt_tokens == 0
    assert kv.take_loaded_tokens() == 0


def test_the_copy_from_host_memory_is_priced_before_the_step():
    model = HostLoadStepTime(ConstantStepTime(0.01), 2e-6)
    assert model.step_time_s(StepShape(8, 2, 64, 40)) == 0.01
    assert model.step_time_s(StepShape(8, 2, 64, 40, host_loaded_tokens=512)) == (512 * 2e-6 + 0.01)
    assert model.decode_stretch_s(StepShape(0, 2, 0, 40), 2, 3) == [0.01] * 3
