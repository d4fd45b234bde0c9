"""SGLang's scheduler on hand-built requests and tiny KV pools, step by step.

Every number below is worked out by hand from SGLang's rules (sim/engine/scheduler/sglang.py):
admit while ``extend + min(max_new, clip) + page < free - reserved``, with
``reserved = sum(rest of output x new_token_ratio)`` over running requests plus each admitted
request's paged prompt, whole output and a page. A pool of 1-token blocks is SGLang's page size.
"""

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from sim.catalog.hardware import GPU
from sim.engine.kv_cache import KVCache
from sim.engine.request import WAITING
from sim.engine.scheduler.base import KV_CAPACITY
from sim.engine.scheduler.sglang import (
    SGLangScheduler,
    default_chunked_prefill_size,
    default_max_running_requests,
)
from sim.engine.scheduler.vllm import VLLMScheduler
from sim.errors import ConfigError
from tests.engine.scheduler.steps import decodes, end, prefills, req, step
from tests.support import REPO_ROOT, fleetcast, option

INIT, FLOOR = 0.7, 0.7 * 0.14  # SGLang's defaults: initial ratio and its floor
DECAY = (INIT - FLOOR) / 600  # per decode step


def sglang(num_blocks: int, block_size: int = 1, **options) -> SGLangScheduler:
    return SGLangScheduler(KVCache(num_blocks, block_size), **options)


def test_reservation_refuses_a_request_vllm_admits():
    sched = sglang(100)
    r0, r1 = req(0, 10, 50), req(1, 10, 45)
    sched.add(r0)
    plan, _ = step(sched, 1.0)  # 10 + 50 + 1 page = 61 < 100 free: admitted
    assert prefills(plan) == [(0, 10)]
    sched.add(r1)
    # free 90; reserved for r0: (50 - 1 generated) x 0.7 = 34.3; left 55.7.
    # r1 needs 10 + 45 + 1 = 56 >= 55.7: refused, and the batch is marked full.
    plan = sched.schedule()
    assert prefills(plan) == [] and decodes(plan) == [0]
    assert sched.batch_is_full and list(sched.waiting) == [r1]

    # vLLM only asks for r1's prompt (10 blocks of 90 free): admitted in the same state.
    vllm = VLLMScheduler(KVCache(100, 1), max_num_batched_tokens=8192)
    v0, v1 = req(0, 10, 50), req(1, 10, 45)
    vllm.add(v0)
    step(vllm, 1.0)
    vllm.add(v1)
    assert prefills(vllm.schedule()) == [(1, 10)]

    # One output token less fits: 10 + 44 + 1 = 55 < 55.7.
    fits = sglang(100)
    fits.add(req(0, 10, 50))
    step(fits, 1.0)
    fits.add(req(1, 10, 44))
    assert prefills(fits.schedule()) == [(1, 10)]


def test_a_full_batch_is_not_retried_while_the_ratio_decays():
    sched = sglang(4000)
    r0, r1 = req(0, 10, 3000), req(1, 10, 1890)
    sched.add(r0)
    step(sched, 1.0)  # 10 + 3000 + 1 < 4000
    sched.add(r1)
    # free 3990, reserved 2999 x 0.7 = 2099.3, left 1890.7 <= 10 + 1890 + 1: refused
    plan, _ = step(sched, 2.0)
    assert decodes(plan) == [0] and sched.batch_is_full
    for t in range(3, 13):
        plan, _ = step(sched, float(t))
        assert decodes(plan) == [0] and list(sched.waiting) == [r1]
    # After these 11 decode steps r1 would fit if tried: free 3990 - 11, reserved
    # (2999 - 11) x (0.7 - 11 x decay). SGLang does not try until the batch shrinks.
    ratio = INIT - 11 * DECAY
    assert sched.new_token_ratio == pytest.approx(ratio)
    assert (3990 - 11) - (2999 - 11) * ratio > 10 + 1890 + 1
    assert r1.status == WAITING


def test_new_token_ratio_decays_per_decode_step_to_its_floor_and_resets_when_idle():
    # 4 decay steps instead of 600: decay = (0.7 - 0.098) / 4 = 0.1505
    sched = sglang(100, new_token_ratio_decay_steps=4)
    r0 = req(0, 5, 7)
    sched.add(r0)
    plan, _ = step(sched, 1.0)
    assert prefills(plan) == [(0, 5)]
    assert sched.new_token_ratio == INIT  # a prefill step does not decay it
    expected = [0.5495, 0.399, 0.2485, 0.098, 0.098]  # then stays at the floor 0.7 x 0.14
    for t, ratio in enumerate(expected, start=2):
        plan, _ = step(sched, float(t))
        assert decodes(plan) == [0]
        assert sched.new_token_ratio == pytest.approx(ratio)
    plan, finished = step(sched, 7.0)  # the 7th output token: r0 completes, nothing is left
    assert finished == [r0]
    assert sched.new_token_ratio == INIT  # idle: back to the initial ratio


def test_prefill_steps_do_not_carry_decodes_unless_mixed():
    for mixed in (False, True):
        sched = sglang(100, enable_mixed_chunk=mixed)
        r0, r1 = req(0, 4, 10), req(1, 6, 10)
        sched.add(r0)
        step(sched, 1.0)
        sched.add(r1)
        plan, _ = step(sched, 2.0)
        assert prefills(plan) == [(1, 6)]
        assert decodes(plan) == ([0] if mixed else [])  # r0 stalls for r1's prompt
        plan, _ = step(sched, 3.0)
        assert decodes(plan) == [0, 1] and prefills(plan) == []
        assert r0.num_generated == (3 if mixed else 2)


def test_a_long_prompt_is_chunked_by_chunked_prefill_size_and_stalls_decodes():
    sched = sglang(200, chunked_prefill_size=8)
    r0 = req(0, 3, 10)
    sched.add(r0)
    step(sched, 1.0)
    r1, r2 = req(1, 20, 5), req(2, 3, 5)
    sched.add(r1)
    sched.add(r2)
    plan, _ = step(sched, 2.0)
    assert prefills(plan) == [(1, 8)] and decodes(plan) == []  # r2 waits: the chunk used 8
    assert sched.chunked is r1
    plan, _ = step(sched, 3.0)
    assert prefills(plan) == [(1, 8)] and decodes(plan) == []  # the chunked request goes first
    plan, _ = step(sched, 4.0)
    assert prefills(plan) == [(1, 4), (2, 3)]  # its last 4 tokens; r2's 3 fill the 8
    assert sched.chunked is None and r1.num_generated == 1 and r2.num_generated == 1
    plan, _ = step(sched, 5.0)
    assert decodes(plan) == [0, 1, 2]
    assert r0.num_generated == 2  # r0 decoded nothing while the prompts ran


def test_a_chunk_is_cut_at_a_page_boundary():
    sched = sglang(100, block_size=4, chunked_prefill_size=10)
    r0 = req(0, 30, 5)
    sched.add(r0)
    plan, _ = step(sched, 1.0)
    assert prefills(plan) == [(0, 8)]  # 10 // 4 pages x 4 tokens
    assert r0.kv_slots == 8


def test_decode_out_of_kv_retracts_fewest_outputs_longest_prompt_to_the_back():
    # A low initial ratio lets both requests in; the pool then runs out mid-decode.
    sched = sglang(34, init_new_token_ratio=0.1, retract_decode_steps=2)
    r0, r1, r2 = req(0, 4, 20), req(1, 6, 20), req(2, 10, 10)
    sched.add(r0)
    step(sched, 1.0)  # 4 + 20 + 1 = 25 < 34
    sched.add(r1)
    # free 30, reserved 19 x 0.1 = 1.9, left 28.1 > 6 + 20 + 1 = 27
    plan, _ = step(sched, 2.0)
    assert prefills(plan) == [(1, 6)]
    sched.add(r2)  # 10 + 10 + 1 = 21 never fits beside them: it waits, the batch is full
    for t in range(3, 15):  # 12 decode steps take the 24 free blocks, 2 per step
        plan, _ = step(sched, float(t))
        assert decodes(plan) == [0, 1] and not plan.preempted
    assert sched.kv.num_free_blocks == 0
    assert (r0.num_generated, r1.num_generated) == (13, 13)
    plan, _ = step(sched, 15.0)
    # equal outputs: the longer prompt (r1) goes; it joins the queue behind r2
    assert plan.preempted == [r1] and decodes(plan) == [0]
    assert list(sched.waiting) == [r2, r1]
    assert r1.num_computed_tokens == 0 and r1.kv_slots == 0 and r1.num_preemptions == 1
    # re-estimated from the one that stays: (13 generated + 2 x 1) / (20 + 1)
    assert sched.new_token_ratio == pytest.approx(15 / 21)
    assert not sched.batch_is_full


def test_max_running_requests_caps_the_batch_and_a_finish_frees_a_seat_one_decode_later():
    sched = sglang(100, max_running_requests=2)
    r0, r1, r2 = req(0, 4, 2), req(1, 4, 3), req(2, 4, 2)
    for r in (r0, r1, r2):
        sched.add(r)
    plan, _ = step(sched, 1.0)
    assert prefills(plan) == [(0, 4), (1, 4)] and sched.batch_is_full
    plan, finished = step(sched, 2.0)
    assert decodes(plan) == [0, 1] and finished == [r0]
    # SGLang tries the prefill before the decode step that filters r0 out of the running
    # batch, so the full flag still holds for one more decode step.
    plan, finished = step(sched, 3.0)
    assert decodes(plan) == [1] and finished == [r1]
    plan, _ = step(sched, 4.0)
    assert prefills(plan) == [(2, 4)]


def test_a_decode_stretch_equals_single_steps_including_the_ratio():
    one, many = sglang(4000), sglang(4000)
    for sched in (one, many):
        sched.add(req(0, 10, 3000))
        step(sched, 1.0)
        sched.add(req(1, 10, 1890))  # refused: the batch is full, so decodes repeat
    plan_one, plan_many = one.schedule(), many.schedule()
    k = many.decode_stretch_limit(plan_many)
    assert k > 100
    end(one, plan_one, 2.0)
    for t in range(3, 3 + 99):
        end(one, one.schedule(), float(t))
    many.advance_decodes(plan_many, 100)
    assert many.new_token_ratio == one.new_token_ratio  # bit for bit
    assert many.running[0].num_generated == one.running[0].num_generated == 101


def test_a_request_sglang_can_never_admit_is_refused():
    sched = sglang(100)
    # vLLM's bound is 100 tokens; SGLang also wants a page beyond prompt + output
    assert sched.rejection_reason(req(0, 60, 40)) == KV_CAPACITY
    assert sched.rejection_reason(req(0, 60, 38)) is None  # 98 + 1 < 100
    assert VLLMScheduler(KVCache(100, 1)).rejection_reason(req(0, 60, 40)) is None


def test_default_max_running_requests_follows_sglangs_request_pool():
    # clamp(16000 / 131072 x 512 = 62, 2048, 4096) = 2048, below 16000 // 2
    assert default_max_running_requests(KVCache(1000, 16), 131072) == 2048
    assert default_max_running_requests(KVCache(100, 1), 131072) == 50  # half the KV tokens
    assert default_max_running_requests(KVCache(100_000, 16), 8192) == 4096
    assert sglang(100, max_model_len=131072).max_running_requests == 50


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"chunked_prefill_size": 3}, "scheduler.chunked_prefill_size"),
        ({"max_running_requests": 0}, "scheduler.max_running_requests"),
        ({"init_new_token_ratio": 1.5}, "scheduler.init_new_token_ratio"),
        ({"new_token_ratio_decay_steps": 0}, "scheduler.new_token_ratio_decay_steps"),
    ],
)
def test_bad_options_name_the_field(options, field):
    with pytest.raises(ConfigError, match=field):
        SGLangScheduler(KVCache(100, 4), **options)


def test_a_whole_run_through_the_cli_finishes_every_request(tmp_path):
    out = tmp_path / "run"
    proc = fleetcast(
        "scheduler=sglang",
        "fleet.replicas=1",
        "workload=poisson",
        "workload.num_requests=60",
        "workload.qps=30",
        "workload.prompt_tokens={dist:uniform,low:1,high:300}",
        "workload.output_tokens={dist:uniform,low:1,high:200}",
        "kv.num_blocks=60",
        "kv.block_size=16",  # 960 tokens: the reservation binds and decode runs out
        "sim.progress=false",
        f"output_dir={out}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["completed"] == 60 and summary["unfinished"] == 0
    requests = pq.read_table(out / "requests.parquet").to_pylist()
    assert {r["status"] for r in requests} == {"completed"}
    assert sum(r["num_preemptions"] for r in requests) > 0  # some were retracted
    check = REPO_ROOT.parent / "shared" / "tools" / "check_run.py"
    if check.is_file():
        verdict = subprocess.run([sys.executable, str(check), str(out)], capture_output=True)
        assert verdict.returncode == 0, verdict.stdout + verdict.stderr


@pytest.mark.parametrize(
    ("hardware", "chunk"),
    [
        ("h100_sxm", 8192),  # 79.6 GiB
        ("a100_80g", 8192),
        ("h200", 8192),  # 140.4 GiB
        ("b200", 16384),  # 179.1 GiB
        ("a100_40g", 4096),
        ("l40s", 4096),  # 45.0 GiB
        ("rtx4090", 2048),  # 24 GiB
    ],
)
def test_chunked_prefill_size_defaults_to_sglangs_for_the_gpus_memory(hardware, chunk):
    gpu = GPU.from_config(option("hardware", hardware))
    assert default_chunked_prefill_size(gpu) == chunk
    assert sglang(100, gpu=gpu).chunked_prefill_size == chunk
    assert sglang(100, gpu=gpu, chunked_prefill_size=64).chunked_prefill_size == 64


def test_minus_one_turns_chunking_off_and_an_unknown_gpu_gets_4096():
    off = sglang(100, chunked_prefill_size=-1)
    assert off.chunked_prefill_size is None and not off.chunked_prefill
    assert sglang(100).chunked_prefill_size == 4096  # SGLang's fallback without a GPU
