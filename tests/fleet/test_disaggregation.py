"""Prefill/decode disaggregation (``placement=disaggregated``, ``sim.fleet.disaggregation``):
times worked out by hand, KV held on both sides during a transfer, back-pressure, every
request ending once under every scheduler, the pools' cost, and refusals."""

from __future__ import annotations

import numpy as np
import pytest

from sim import rng
from sim.config.build import build
from sim.config.schema import validate_run
from sim.deploy.disaggregated import DisaggregatedFleet
from sim.engine.request import COMPLETED, TRANSFERRING
from sim.fleet.cluster import Cluster
from sim.output.request_log import RequestLog
from sim.output.results import requests_schema
from sim.output.step_log import StepLog
from sim.output.tables import MemorySink
from sim.run import simulate
from sim.workload.source import build_workload
from tests.contract import table_problems
from tests.support import columns, compose

STEP_S = 0.01
KV_BYTES_PER_TOKEN = 131072  # Llama-3.1-8B, BF16: 2 x 32 layers x 8 KV heads x 128 x 2 bytes
ONE_REQUEST = (
    "placement=disaggregated",
    "fleet.replicas=2",
    "step_time=constant",
    f"step_time.seconds={STEP_S}",
    "workload=poisson",
    "workload.num_requests=1",
    "workload.prompt_tokens=1000",
    "workload.output_tokens=5",
    "placement.kv_link={gb_per_s: 1, latency_us: 1000}",
    "sim.progress=false",
)


def _run(*overrides: str):
    result = simulate(compose(*overrides))
    assert result.requests is not None and result.steps is not None
    return result, columns(result.requests), columns(result.steps)


@pytest.mark.parametrize("overlap", [False, True])
def test_one_request_by_hand(overlap):
    result, req, steps = _run(*ONE_REQUEST, f"placement.kv_transfer_overlap={overlap}")
    arrival = req["arrival_time_s"][0]
    # the whole prompt in one prefill step on replica 0; its first token ends it (TTFT)
    assert req["first_token_time_s"][0] == pytest.approx(arrival + STEP_S, abs=1e-12)
    whole_s = 1000 * KV_BYTES_PER_TOKEN / 1e9  # 0.131072 s over one 1 GB/s link
    # with the overlap, the prefill's own 10 ms were spent streaming already
    moving_s = max(whole_s - STEP_S, whole_s / 32) if overlap else whole_s
    transfer_end = arrival + STEP_S + 1e-3 + moving_s
    assert req["transfer_start_s"][0] == pytest.approx(arrival + STEP_S, abs=1e-12)
    assert req["transfer_end_s"][0] == pytest.approx(transfer_end, abs=1e-12)
    # four more tokens, one decode step each, on the decode replica
    assert req["completion_time_s"][0] == pytest.approx(transfer_end + 4 * STEP_S, abs=1e-12)
    assert req["prefill_replica_id"][0] == 0 and req["decode_replica_id"][0] == 1
    assert req["replica_id"][0] == 1
    assert list(steps["pool"]) == ["prefill"] + ["decode"] * 4
    assert list(steps["replica_id"]) == [0, 1, 1, 1, 1]
    assert list(steps["num_prefill_tokens"]) == [1000, 0, 0, 0, 0]
    moved = result.summary["disaggregation"]
    assert moved["transfers"] == 1
    assert moved["transfer_s"]["p50"] == pytest.approx(1e-3 + moving_s, abs=1e-12)
    assert moved["transfer_wait_s"]["p50"] == 0.0
    assert moved["kv_bytes_per_token"] == KV_BYTES_PER_TOKEN


def test_a_one_token_output_completes_on_the_prefill_replica():
    result, req, _ = _run(*ONE_REQUEST, "workload.output_tokens=1")
    assert req["status"][0] == COMPLETED
    assert req["completion_time_s"][0] == req["first_token_time_s"][0]
    assert np.isnan(req["transfer_start_s"][0]) and np.isnan(req["decode_replica_id"][0])
    assert result.summary["disaggregation"]["transfers"] == 0


def _cluster(*overrides: str) -> tuple[Cluster, DisaggregatedFleet]:
    """The cluster ``simulate`` would run, to look inside while it runs."""
    cfg = compose(*overrides)
    run = validate_run(cfg)
    fleet = DisaggregatedFleet(cfg, run)
    cluster = Cluster(
        build_workload(run.workload, run.seed),
        fleet.replica_engines(),
        build(cfg["router"], "router", rng=rng.stream(run.seed, "router")),
        RequestLog(MemorySink(requests_schema(disaggregated=True))),
        StepLog("none", [fleet.prefill.deployment.memory.num_blocks]),
        routed_replicas=fleet.prefill.replicas,
    )
    fleet.connect(cluster, run.seed)
    return cluster, fleet


def test_the_pools_are_joined_through_their_replicas_own_methods():
    cluster, fleet = _cluster(*ONE_REQUEST, "fleet.replicas=3")
    prefill, *decode = cluster.replicas
    # a prefill replica hands its requests over; each decode replica waits for room
    assert prefill.on_handoff is not None and prefill.on_room is None
    assert all(r.on_room is not None and r.on_handoff is None for r in decode)
    assert all(r.engines[0].scheduler.in_pool for r in cluster.replicas)
    assert prefill.engines[0].scheduler.decode_pool is not None
    assert all(r.engines[0].scheduler.decode_pool is None for r in decode)
    cluster.run()
    assert all(r.transfers_waiting == 0 for r in decode)  # each one queued has started


def test_kv_is_held_on_both_sides_during_the_transfer_and_freed_after():
    cluster, _ = _cluster(*ONE_REQUEST, "placement.kv_transfer_overlap=false")
    prefill, decode = (r.engines[0].scheduler for r in cluster.replicas)
    blocks = -(-1000 // 16)  # the prompt's blocks of 16 tokens
    env = cluster.env
    while not prefill.running:  # until the request is being prefilled
        env.step()
    request = prefill.running[0]
    while request.transfer_start_s is None:  # until its transfer is booked
        env.step()
    start = request.transfer_start_s
    env.run(until=start + 0.5 * 0.131072)  # halfway through the 131 ms transfer
    assert request.status is TRANSFERRING and request not in prefill.running
    assert prefill.kv.num_used_blocks == blocks
    assert decode.kv.num_used_blocks == blocks
    assert not decode.running
    env.run()
    assert request.status == COMPLETED
    assert prefill.kv.num_used_blocks == 0 and decode.kv.num_used_blocks == 0
    assert request.kv_slots == 0


BACK_PRESSURE = (
    "placement=disaggregated",
    "fleet.replicas=2",
    "step_time=constant",
    f"step_time.seconds={STEP_S}",
    "workload=poisson",
    "workload.num_requests=60",
    "workload.qps=200",
    "workload.prompt_tokens=160",
    "workload.output_tokens=40",
    # the decode replica holds about two requests, the prefill replica four prompts
    "placement.decode.settings={kv.num_blocks: 26}",
    "placement.prefill.settings={kv.num_blocks: 44}",
    "sim.progress=false",
)


def test_a_full_decode_pool_stalls_transfers_and_the_prefill_pool_and_loses_nothing():
    cluster, _ = _cluster(*BACK_PRESSURE)
    prefill, decode = (r.engines[0].scheduler for r in cluster.replicas)
    stalled = waited = False
    env = cluster.env
    while env.peek() != float("inf"):
        env.step()
        assert prefill.kv.num_used_blocks <= prefill.kv.num_blocks
        assert decode.kv.num_used_blocks <= decode.kv.num_blocks
        if cluster.replicas[1].transfers_waiting:
            waited = True
        # the prefill replica has prompts waiting, none running, its KV held by transfers
        if prefill.waiting and not prefill.running and prefill.kv.num_used_blocks:
            stalled = True
    assert waited and stalled
    assert cluster.num_ended == 60 and cluster.finished()
    assert prefill.kv.num_used_blocks == 0 and decode.kv.num_used_blocks == 0


def test_back_pressure_in_the_files():
    result, req, steps = _run(*BACK_PRESSURE)
    problems = table_problems(result.requests, result.steps, result.summary)
    assert not problems, problems
    assert (req["status"] == COMPLETED).all()
    wait = req["transfer_start_s"] - req["first_token_time_s"]
    assert wait.max() > 10 * STEP_S  # some KV waited for decode room
    assert (req["transfer_end_s"] >= req["transfer_start_s"]).all()
    assert (req["completion_time_s"] > req["transfer_end_s"]).all()
    for pool, blocks in (("prefill", 44), ("decode", 26)):
        mine = steps["pool"] == pool
        assert steps["kv_blocks_used"][mine].max() <= blocks
    assert result.summary["disaggregation"]["transfer_wait_s"]["p99"] > 10 * STEP_S


@pytest.mark.parametrize("scheduler", ["vllm", "sglang", "trtllm", "sarathi", "prefill_first"])
def test_every_scheduler_serves_both_pools(scheduler):
    overrides = [
        *(o for o in BACK_PRESSURE[:-3] if not o.startswith("step_time")),
        f"scheduler={scheduler}",
        "workload.num_requests=80",
        "workload.prompt_tokens={dist: uniform, low: 20, high: 300}",
        "workload.output_tokens={dist: uniform, low: 1, high: 60}",
        "placement.decode.settings={kv.num_blocks: 60}",
        "placement.prefill.settings={kv.num_blocks: 60}",
        "fleet.replicas=3",
        "sim.progress=false",
    ]
    result, req, _ = _run(*overrides)
    assert not table_problems(result.requests, result.steps, result.summary)
    assert (req["status"] == COMPLETED).all()
    handed = req["output_tokens"] > 1
    assert (req["prefill_replica_id"] == 0).all()
    assert set(req["decode_replica_id"][handed].astype(int)) <= {1, 2}
    # each ends once; a preempted decode recomputes on its decode replica
    assert sorted(req["request_id"].tolist()) == list(range(80))


@pytest.mark.parametrize("scheduler", ["vllm", "sglang", "trtllm"])
def test_runs_are_deterministic_and_stretches_change_nothing(scheduler):
    overrides = [*BACK_PRESSURE[:-1], "fleet.replicas=3", f"scheduler={scheduler}"]
    first, again = simulate(compose(*overrides)), simulate(compose(*overrides))
    stepwise = simulate(compose(*overrides, "sim.fast_forward_decode=false"))
    for other in (again, stepwise):
        assert first.requests.equals(other.requests)
        assert first.steps.equals(other.steps)


# a decode pool small enough that decodes preempt one another while transfers keep room there
PREEMPTING_DECODES = (
    "placement=disaggregated",
    "fleet.replicas=3",
    "workload=poisson",
    "workload.qps=100",
    "workload.num_requests=150",
    "workload.prompt_tokens={dist: uniform, low: 10, high: 400}",
    "workload.output_tokens={dist: uniform, low: 1, high: 120}",
    "placement.decode.settings={kv.num_blocks: 30}",
    "placement.prefill.settings={kv.num_blocks: 60}",
    "sim.progress=false",
)


@pytest.mark.parametrize("scheduler", ["vllm", "sglang", "trtllm", "sarathi", "prefill_first"])
def test_preempted_decodes_get_room_before_transfers_and_nothing_stalls(scheduler):
    result, req, steps = _run(*PREEMPTING_DECODES, f"scheduler={scheduler}")
    assert not table_problems(result.requests, result.steps, result.summary)
    # every request ends: completed, or refused up front for a decode pool too small for it
    assert set(req["status"]) == {COMPLETED, "rejected"}
    assert set(req["reject_reason"][req["status"] == "rejected"]) == {"kv_capacity"}
    decoding = steps["pool"] == "decode"
    assert steps["kv_blocks_used"][decoding].max() <= 30
    if scheduler != "trtllm":  # (guaranteed_no_evict never preempts)
        assert result.summary["num_preemptions"] > 0


@pytest.mark.parametrize("scheduler", ["vllm", "sglang", "sarathi", "prefill_first"])
def test_seats_kept_for_transfers_count_against_max_num_seqs(scheduler):
    seats = "scheduler.max_running_requests" if scheduler == "sglang" else "scheduler.max_num_seqs"
    result, req, steps = _run(
        *(o for o in PREEMPTING_DECODES if not o.startswith("placement.decode.settings")),
        f"scheduler={scheduler}",
        "placement.prefill.replicas=2",
        "workload.qps=200",
        f"placement.decode.settings={{kv.num_blocks: 30, kv.watermark: 0, {seats}: 4}}",
    )
    assert set(req["status"]) <= {COMPLETED, "rejected"}
    assert steps["num_seqs"][steps["pool"] == "decode"].max() <= 4


def test_no_transfer_time_is_stamped_past_the_horizon():
    result, req, _ = _run(
        *ONE_REQUEST[:5],
        "workload.qps=50",
        "workload.num_requests=200",
        "workload.prompt_tokens=2000",
        "workload.output_tokens=50",
        "placement.kv_link={gb_per_s: 1, latency_us: 1000}",
        "sim.horizon_s=2",
        "sim.progress=false",
    )
    assert (req["status"] == "unfinished").any()
    for column in ("transfer_start_s", "transfer_end_s"):
        stamped = req[column][~np.isnan(req[column])]
        assert len(stamped) and (stamped < 2).all()
    assert result.summary["disaggregation"]["transfer_wait_s"]["p99"] < 2


def test_the_overlap_hides_only_prefill_time_when_the_links_were_free(tmp_path):
    """A's KV occupies the link while B's prompt is computed: B's transfer hides only the part
    of its prefill after A's transfer ended (worked by hand)."""
    trace = tmp_path / "two.csv"
    # A: one 1,000-token step at 0; B: 9,000 tokens in nine 1,000-token chunks from 0.05 s
    trace.write_text("arrival_time_s,prompt_tokens,output_tokens\n0.0,1000,2\n0.05,9000,2\n")
    _, req, _ = _run(
        *(o for o in ONE_REQUEST if not o.startswith("workload")),
        "workload=trace",
        f"workload.path={trace}",
        "placement.prefill.settings={scheduler.max_num_batched_tokens: 1000}",
    )
    whole_a, whole_b = (n * KV_BYTES_PER_TOKEN / 1e9 for n in (1000, 9000))
    a_end = STEP_S + 1e-3 + (whole_a - STEP_S)  # A hid its own 10-ms prefill
    assert req["transfer_end_s"][0] == pytest.approx(a_end, abs=1e-12)
    b_first_token = 0.05 + 9 * STEP_S
    assert req["transfer_start_s"][1] == pytest.approx(b_first_token, abs=1e-12)
    hidden = b_first_token - a_end  # not the whole 90 ms of B's prefill
    assert req["transfer_end_s"][1] == pytest.approx(
        b_first_token + 1e-3 + whole_b - hidden, abs=1e-12
    )


def test_a_draft_models_kv_moves_with_the_targets():
    run = simulate(compose(*ONE_REQUEST, "model=llama31_70b", "fleet.tp=4"))
    drafted = simulate(
        compose(
            *ONE_REQUEST,
            "model=llama31_70b",
            "fleet.tp=4",
            "spec_decode.num_draft_tokens=2",
            "spec_decode.method=draft_model",
            "spec_decode.draft_model=llama31_8b",
        )
    )
    # Llama-3.1-70B: 80 layers x 8 KV heads x 128 x 2 (K and V) x 2 bytes; the 8B's 32 layers
    target = 2 * 80 * 8 * 128 * 2
    assert run.summary["disaggregation"]["kv_bytes_per_token"] == target
    assert drafted.summary["disaggregation"]["kv_bytes_per_token"] == target + KV_BYTES_PER_TOKEN


def test_the_decode_pools_acceptance_draws_do_not_depend_on_the_prefill_pools_size():
    def first_draws(prefill_replicas: int) -> list[float]:
        cfg = compose(
            *ONE_REQUEST,
            f"fleet.replicas={prefill_replicas + 2}",
            f"placement.prefill.replicas={prefill_replicas}",
            "spec_decode.num_draft_tokens=2",
        )
        engines = DisaggregatedFleet(cfg, validate_run(cfg)).replica_engines()
        decoding = [e[0].scheduler.acceptance for e in engines[prefill_replicas:]]
        return [float(a.rng.random()) for a in decoding]

    assert first_draws(1) == first_draws(3)
