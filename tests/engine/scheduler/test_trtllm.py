"""TensorRT-LLM's in-flight batching on hand-built requests and tiny KV pools, step by step.

Each case is worked out by hand from TensorRT-LLM's capacity and micro-batch schedulers (see
``sim.engine.scheduler.trtllm``): who fits, who runs, how many tokens, who is paused. Ends with
a whole run through the command line.
"""

import json

import pytest

from sim.engine.kv_cache import KVCache
from sim.engine.request import COMPLETED, RUNNING, WAITING
from sim.engine.scheduler.trtllm import TRTLLMScheduler
from sim.engine.scheduler.vllm import VLLMScheduler
from sim.errors import ConfigError
from tests.contract import run_problems
from tests.engine.scheduler.steps import decodes, prefills, req, shape, step
from tests.support import fleetcast


def trt(kv: KVCache, **options) -> TRTLLMScheduler:
    options.setdefault("max_num_seqs", 8)
    options.setdefault("max_num_batched_tokens", 64)
    return TRTLLMScheduler(kv, **options)


# -- the capacity policies ----------------------------------------------------------------------


def test_guaranteed_no_evict_waits_for_room_for_the_whole_output_and_never_preempts():
    # 8 blocks of 4 tokens. Each request needs ceil((8 + 12) / 4) = 5 blocks to completion:
    # after the first reserves 5, the 3 left cannot hold the second's 5.
    kv = KVCache(8, 4)
    sched = trt(kv)
    r0, r1 = req(0, 8, 12), req(1, 8, 12)
    sched.add(r0)
    sched.add(r1)
    plan, _ = step(sched, 1.0)
    assert prefills(plan) == [(0, 8)] and decodes(plan) == []
    assert r1.status == WAITING and kv.num_used_blocks == 2  # the prompt's blocks only
    assert sched.blocks_to_completion(r0) == 3

    # r0 decodes alone; between arrivals its 11 decodes are one stretch (nothing changes)
    plan = sched.schedule()
    assert decodes(plan) == [0] and prefills(plan) == []
    assert sched.decode_stretch_limit(plan) == 11
    sched.on_step_end(plan)
    for t in range(3, 13):  # steps 3..12: r0's other decodes, r1 still refused
        plan, finished = step(sched, float(t))
        assert decodes(plan) == [0] and prefills(plan) == [] and not plan.preempted
        assert r1.status == WAITING
    assert finished == [r0] and r0.status == COMPLETED and r0.num_preemptions == 0
    plan, _ = step(sched, 13.0)  # r0's blocks are free: r1 starts
    assert prefills(plan) == [(1, 8)]
    assert r1.first_token_time_s == 13.0

    # vLLM's admission on the same pool takes both prompts at once
    vllm = VLLMScheduler(KVCache(8, 4), max_num_seqs=8, max_num_batched_tokens=64)
    v0, v1 = req(0, 8, 12), req(1, 8, 12)
    vllm.add(v0)
    vllm.add(v1)
    plan, _ = step(vllm, 1.0)
    assert prefills(plan) == [(0, 8), (1, 8)]


def test_max_utilization_admits_both_then_pauses_the_last_started_when_kv_runs_out():
    kv = KVCache(8, 4)
    sched = trt(kv, capacity_policy="max_utilization")
    r0, r1 = req(0, 8, 12), req(1, 8, 12)
    sched.add(r0)
    sched.add(r1)
    plan, _ = step(sched, 1.0)  # only this step's blocks count: 2 + 2 of 8
    assert prefills(plan) == [(0, 8), (1, 8)] and kv.num_used_blocks == 4
    for t in range(2, 10):  # 8 decodes each: 16 tokens computed, 4 blocks each, pool full
        plan, _ = step(sched, float(t))
        assert decodes(plan) == [0, 1] and not plan.preempted
    assert kv.num_used_blocks == 8 and r0.num_computed_tokens == 16
    # step 10: r0's 17th token needs a fifth block; none is free, so the last started request
    # (r1) is paused, its 4 blocks freed, and r0 gets one of them
    plan, _ = step(sched, 10.0)
    assert plan.preempted == [r1] and decodes(plan) == [0] and prefills(plan) == []
    assert r1.status == WAITING and r1.kv_slots == 0 and r1.num_preemptions == 1
    assert r1.num_generated == 9 and sched.waiting[0] is r1
    assert kv.num_used_blocks == 5
    # r1 must recompute 8 + 9 - 1 = 16 tokens, 4 blocks; 3 are free until r0 completes
    for t in (11.0, 12.0):
        plan, finished = step(sched, t)
        assert decodes(plan) == [0] and prefills(plan) == []
    assert finished == [r0]
    plan, _ = step(sched, 13.0)
    assert prefills(plan) == [(1, 16)] and kv.num_used_blocks == 4
    plan, _ = step(sched, 14.0)
    assert decodes(plan) == [1] and r1.num_generated == 10


# -- the micro-batch scheduler ------------------------------------------------------------------


def test_max_batch_size_caps_requests_in_a_step():
    sched = trt(KVCache(100, 4), max_num_seqs=2, max_num_batched_tokens=64)
    for i in range(3):
        sched.add(req(i, 8, 4))
    plan, _ = step(sched, 1.0)
    assert prefills(plan) == [(0, 8), (1, 8)]
    plan, _ = step(sched, 2.0)
    assert decodes(plan) == [0, 1] and prefills(plan) == []  # the third waits for a seat
    assert sched.waiting[0].request_id == 2


def test_max_num_tokens_ends_the_step_at_the_first_context_that_does_not_fit():
    sched = trt(KVCache(100, 4), max_num_batched_tokens=20)
    r0, r1, r2 = req(0, 12, 4), req(1, 12, 4), req(2, 4, 4)
    for r in (r0, r1, r2):
        sched.add(r)
    plan, _ = step(sched, 1.0)
    # 12 + 12 > 20 stops the list: r2 (4 tokens) would fit but comes after r1
    assert prefills(plan) == [(0, 12)]
    # generation first (1 token), then r1's 12 = 13; r2's 4 more = 17 also fit
    plan = sched.schedule()
    assert decodes(plan) == [0] and prefills(plan) == [(1, 12), (2, 4)]
    # P = 16, D = 1, Ap = 12*12 + 4*4, Ad = 12 prompt + 1 generated
    assert shape(plan) == (16, 1, 160, 13)


def test_chunked_context_first_come_first_served_cuts_whole_blocks():
    sched = trt(KVCache(100, 4), max_num_batched_tokens=12, enable_chunked_context=True)
    r0, r1 = req(0, 30, 3), req(1, 7, 3)
    sched.add(r0)
    sched.add(r1)
    plan, _ = step(sched, 1.0)
    assert prefills(plan) == [(0, 12)]  # 30 and 7 want 37 > 12: r0 takes all 12, r1 none
    assert r0.kv_slots == 32 and r1.status == WAITING  # r0's whole prompt is allocated
    plan, _ = step(sched, 2.0)
    assert prefills(plan) == [(0, 12)]
    plan, _ = step(sched, 3.0)
    # r0's last 6, then 6 left for r1's 7: cut to one whole block of 4
    assert prefills(plan) == [(0, 6), (1, 4)]
    assert r0.first_token_time_s == 3.0 and r1.first_token_time_s is None
    plan, _ = step(sched, 4.0)
    assert decodes(plan) == [0] and prefills(plan) == [(1, 3)]  # 1 + 3 fits: no cut
    assert r1.first_token_time_s == 4.0


def test_chunked_context_equal_progress_hands_out_a_block_each_in_turn():
    sched = trt(
        KVCache(100, 4),
        max_num_batched_tokens=12,
        enable_chunked_context=True,
        context_chunking_policy="equal_progress",
    )
    r0, r1 = req(0, 30, 3), req(1, 7, 3)
    sched.add(r0)
    sched.add(r1)
    plan, _ = step(sched, 1.0)
    # rounds of 4: r0 4, r1 4 (8); r0 8 (12); r1's last 3 would make 15 > 12
    assert prefills(plan) == [(0, 8), (1, 4)]
    plan, _ = step(sched, 2.0)
    # r0 wants 22, r1 3: r0 4, r1 3 (7); r0 8 (11); r0's next 4 would make 15
    assert prefills(plan) == [(0, 8), (1, 3)]
    assert r1.first_token_time_s == 2.0 and r1.status == RUNNING


def test_chunk_sizes_by_policy():
    fcfs = trt(KVCache(10, 4), enable_chunked_context=True)
    assert fcfs.chunk_sizes([10, 5, 3], 9) == [8, 0, 0]  # 9 is cut to 8; then 1 < 5 and < 4
    assert fcfs.chunk_sizes([6, 2], 9) == [6, 2]
    equal = trt(
        KVCache(10, 4), enable_chunked_context=True, context_chunking_policy="equal_progress"
    )
    assert equal.chunk_sizes([10, 5, 3], 9) == [4, 5, 0]  # 4, 4 (r2's 3 > 9); r1's last 1
    assert equal.chunk_sizes([10, 5, 3], 11) == [4, 4, 3]


# -- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"capacity_policy": "fcfs"}, "scheduler.capacity_policy"),
        ({"context_chunking_policy": "random"}, "scheduler.context_chunking_policy"),
        (
            {"enable_chunked_context": True, "max_num_batched_tokens": 3},
            "scheduler.max_num_batched_tokens",
        ),
    ],
)
def test_bad_options_are_one_line_errors(options, field):
    with pytest.raises(ConfigError) as error:
        TRTLLMScheduler(KVCache(10, 4), **options)
    assert error.value.field == field and "\n" not in str(error.value)


def test_whole_prompt_beyond_max_num_tokens_is_refused_without_chunking():
    sched = trt(KVCache(100, 4), max_num_batched_tokens=16)
    assert sched.rejection_reason(req(0, 17, 4)) == "prefill_budget"
    assert sched.rejection_reason(req(1, 16, 40)) is None  # never paused: the prompt is all
    paused = trt(KVCache(100, 4), max_num_batched_tokens=16, capacity_policy="max_utilization")
    assert paused.rejection_reason(req(1, 16, 40)) == "prefill_budget"  # recompute 16 + 38


# -- a whole run --------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["guaranteed_no_evict", "max_utilization"])
def test_cli_run_finishes_every_request(tmp_path, policy):
    out = tmp_path / "run"
    proc = fleetcast(
        "scheduler=trtllm",
        f"scheduler.capacity_policy={policy}",
        "scheduler.enable_chunked_context=true",
        "kv.num_blocks=40",  # 640 tokens: requests compete for KV
        "fleet.replicas=1",
        "workload=poisson",
        "workload.num_requests=30",
        "workload.qps=20",
        "workload.prompt_tokens=64",
        "workload.output_tokens=32",
        "sim.progress=false",
        f"output_dir={out}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert run_problems(out) == []
    summary = json.loads((out / "summary.json").read_text())
    assert summary["completed"] == 30 and summary["rejected"] == summary["unfinished"] == 0
