"""Faults on a disaggregated fleet (``sim.fleet.faults`` with ``sim.fleet.disaggregation``; the
how-to is docs/how-to/faults.md, "A disaggregated fleet"): losing a decode replica (its
requests start over from the prefill pool), losing a prefill replica with a transfer in
flight (called off: the decode replica's kept room released, the request prefilled again or
failed), a pool with no replica up (``no_replica``), ``faults.by_pool``; and the invariants
under random faults (every request ends once, no step on a replica that is down, the same files
on a rerun).

The hand-worked fleet: 2 prefill replicas (0, 1) and 2 decode replicas (2, 3), round robin in
both pools, a request every 2 s from 2 s (one at a time in the fleet), 10 prompt tokens and 100
output tokens, every step 10 ms. A link of 10 MB/s and 1 ms, no layer-by-layer overlap: the 10
tokens' KV (131,072 bytes each, Llama-3.1-8B in BF16) moves in 0.001 + 1.31072 / 10 =
0.132072 s. A request alone: prefilled in one step (first token 0.01 s after its start), its
transfer at once (to 0.142072 s), then 99 decode steps (last token 1.132072 s after its start).
Request 0 (2.0 s) prefills on replica 0 and decodes on replica 2; fault times fall mid-step.
"""

from __future__ import annotations

import copy
import functools
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.run import simulate
from tests.fleet.test_faults import (
    approx,
    assert_ends_once,
    assert_no_step_while_down,
    fault_rows,
    fault_settings,
    step_spans,
)
from tests.support import columns, compose

MOVE_S = 0.001 + 10 * 131072 / 1e7  # one request's transfer
POOLS = [
    "placement=disaggregated",
    "fleet.replicas=4",
    "placement.prefill.replicas=2",
    "placement.decode_router=round_robin",
    "placement.kv_transfer_overlap=false",
    "placement.kv_link={gb_per_s: 0.01, latency_us: 1000}",
    "workload=constant",
    "workload.qps=0.5",
    "workload.num_requests=4",
    "workload.prompt_tokens=10",
    "workload.output_tokens=100",
    "step_time=constant",
    "step_time.seconds=0.01",
    "router=round_robin",
]
ONE_EACH = ["fleet.replicas=2", "placement.prefill.replicas=1"]  # replica 0 prefills, 1 decodes


def run(*overrides: str):
    return simulate(compose(*POOLS, *overrides))


def test_losing_a_decode_replica_starts_its_requests_over_from_prefill():
    """Decode replica 2 fails at 2.505 s, 0.363 s into request 0's decode (its KV arrived at
    2.142072 s), back at 4.505 s. Request 0 is sent again to the prefill pool: round robin's
    turn gives it replica 1, idle, which prefills it from scratch (2.505 -> 2.515 s: its first
    token again, TTFT 0.515 s); the decode router has replica 3 only; the transfer ends at
    2.515 + 0.132072 s and the 99 decode steps 0.99 s later. Time lost: 0.505 s. Replica 2 took
    36 steps (to 2.502072 s), none while down; the pools' availability: the prefill pool's
    whole, the decode pool's 1 - 2 / (2 x span)."""
    result = run("faults.schedule=[{replica: 2, at_s: 2.505, repair_s: 2}]")
    assert fault_rows(result) == [(2, "failure", 2.505, 2.505, 4.505, 1, 0)]
    req = columns(result.requests)
    assert (req["prefill_replica_id"][0], req["replica_id"][0]) == (1, 3)
    assert req["retries"].tolist() == [1, 0, 0, 0]
    assert req["retry_lost_s"][0] == approx(0.505)
    assert req["first_token_time_s"][0] == approx(2.515)
    assert req["transfer_start_s"][0] == approx(2.515)
    assert req["transfer_end_s"][0] == approx(2.515 + MOVE_S)
    assert req["completion_time_s"][0] == approx(2.515 + MOVE_S + 0.99)
    assert set(req["status"].tolist()) == {"completed"}
    start, end = step_spans(result, 2)
    assert ((end <= 2.505 + 1e-9) | (start >= 4.505)).all()
    assert (end <= 2.505).sum() == 36 and end[end <= 2.505].max() == approx(
        2.0 + 0.01 + MOVE_S + 0.36
    )
    by_pool = result.summary["faults"]["by_pool"]
    span = result.summary["duration_s"]
    assert by_pool["prefill"]["availability"] == 1.0
    assert by_pool["decode"]["availability"] == approx(1 - 2.0 / (2 * span))
    assert (by_pool["decode"]["failures"], by_pool["decode"]["requests_retried"]) == (1, 1)
    assert (by_pool["prefill"]["failures"], by_pool["prefill"]["requests_retried"]) == (0, 0)
    assert (by_pool["prefill"]["replicas"], by_pool["decode"]["replicas"]) == (2, 2)


@pytest.mark.parametrize("on_failure", ["retry", "fail"])
def test_losing_a_prefill_replica_calls_its_transfer_off(on_failure):
    """Prefill replica 0 fails at 2.105 s, while request 0's KV moves to decode replica 2
    (2.01 -> 2.142072 s). The transfer is called off: replica 2 gives back the room it kept
    and never sees the request (no step before the next request it is given). Retried, the
    request is prefilled again on replica 1 (2.105 -> 2.115 s) and the decode router's turn
    gives it replica 3: transfer 2.115 s -> + 0.132072 s, last token 0.99 s later; 0.105 s
    lost. Failed, it ends with ``replica_failure`` and the first token its client had (2.01 s),
    its transfer never ended."""
    result = run(
        "faults.schedule=[{replica: 0, at_s: 2.105, repair_s: 2}]",
        f"faults.on_failure={on_failure}",
    )
    retried = on_failure == "retry"
    assert fault_rows(result) == [(0, "failure", 2.105, 2.105, 4.105, int(retried), 1 - retried)]
    req = columns(result.requests)
    if retried:
        assert (req["prefill_replica_id"][0], req["replica_id"][0]) == (1, 3)
        assert (req["retries"][0], req["retry_lost_s"][0]) == (1, approx(0.105))
        assert req["first_token_time_s"][0] == approx(2.115)
        assert req["transfer_start_s"][0] == approx(2.115)
        assert req["completion_time_s"][0] == approx(2.115 + MOVE_S + 0.99)
        assert set(req["status"].tolist()) == {"completed"}
    else:
        assert (req["status"][0], req["fail_reason"][0]) == ("failed", "replica_failure")
        assert req["first_token_time_s"][0] == approx(2.01)
        assert req["transfer_start_s"][0] == approx(2.01)
        assert math.isnan(req["transfer_end_s"][0])
        assert result.summary["failed_by_reason"] == {"replica_failure": 1}
    start, _ = step_spans(result, 2)
    assert start.min() >= 4.0  # (the next request it decodes arrives at 4 s or later)
    start, end = step_spans(result, 0)
    assert ((end <= 2.105) | (start >= 4.105)).all()
    by_pool = result.summary["faults"]["by_pool"]
    assert by_pool["prefill"]["failures"] == 1 and by_pool["decode"]["failures"] == 0
    assert by_pool["prefill"]["requests_retried" if retried else "requests_failed"] == 1


def test_a_decode_drain_waiting_only_for_a_transfer_called_off_ends_with_it():
    """Decode replica 2 drains for maintenance from 2.05 s, waiting for request 0, whose KV
    moves to it (2.01 -> 2.142072 s). Prefill replica 0 fails at 2.105 s: the transfer is
    called off, and replica 2, left with nothing, leaves at once (down at 2.105 s, back 1 s
    later) instead of waiting for a request that will not come. Request 0 is prefilled again
    on replica 1 and decoded on replica 3, the one decode replica the router may choose."""
    result = run(
        "faults.maintenance=[{replica: 2, at_s: 2.05, duration_s: 1}]",
        "faults.schedule=[{replica: 0, at_s: 2.105, repair_s: 2}]",
    )
    assert sorted(fault_rows(result)) == [
        (0, "failure", 2.105, 2.105, 4.105, 1, 0),
        (2, "maintenance", 2.05, 2.105, 3.105, 0, 0),
    ]
    req = columns(result.requests)
    assert (req["prefill_replica_id"][0], req["replica_id"][0]) == (1, 3)
    assert req["completion_time_s"][0] == approx(2.115 + MOVE_S + 0.99)


def test_with_no_decode_replica_up_prefilled_requests_fail_for_want_of_one():
    """One replica in each pool; the decode replica fails for good at 2.505 s. Request 0 is
    sent again, prefilled again (first token 2.515 s), and finds no decode replica at its
    hand-off: it fails (``no_replica``, 1 retry, 0.505 s lost), as does every later request
    once prefilled, ``on_failure=retry`` notwithstanding."""
    result = run(*ONE_EACH, "faults.schedule=[{replica: 1, at_s: 2.505}]")
    req = columns(result.requests)
    assert req["status"].tolist() == ["failed"] * 4
    assert req["fail_reason"].tolist() == ["no_replica"] * 4
    assert req["retries"].tolist() == [1, 0, 0, 0]
    assert req["retry_lost_s"][0] == approx(0.505)
    assert req["first_token_time_s"].tolist() == approx([2.515, 4.01, 6.01, 8.01])
    assert [math.isnan(t) for t in req["transfer_start_s"][1:]] == [True] * 3
    _, end = step_spans(result, 1)
    assert len(end) == 36 and end.max() < 2.505
    assert result.summary["failed_by_reason"] == {"no_replica": 4}


def test_with_no_prefill_replica_up_new_requests_fail_and_decodes_go_on():
    """One replica in each pool; the prefill replica fails for good at 2.505 s, after request
    0's KV left it (2.142072 s): request 0 decodes to its end on replica 1 (3.132072 s); each
    later request finds no prefill replica and fails at its arrival, never routed."""
    result = run(*ONE_EACH, "faults.schedule=[{replica: 0, at_s: 2.505}]")
    assert fault_rows(result) == [(0, "failure", 2.505, 2.505, None, 0, 0)]
    req = columns(result.requests)
    assert req["status"].tolist() == ["completed"] + ["failed"] * 3
    assert req["completion_time_s"][0] == approx(2.01 + MOVE_S + 0.99)
    assert req["fail_reason"].tolist()[1:] == ["no_replica"] * 3
    assert result.requests.column("replica_id").null_count == 3


# -- invariants under random faults -------------------------------------------------------


@functools.cache
def _loaded_pools() -> dict:
    """2 prefill and 2 decode replicas under a load that queues, with small KV pools (transfers
    wait for room on the decode side: back-pressure), composed once."""
    return compose(
        "placement=disaggregated",
        "fleet.replicas=4",
        "placement.prefill.replicas=2",
        "workload=poisson",
        "workload.qps=40",
        "workload.num_requests=80",
        "workload.prompt_tokens=100",
        "workload.output_tokens=60",
        "kv.num_blocks=48",
    )


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(faults=fault_settings(), seed=st.integers(0, 3))
def test_every_request_ends_once_and_no_down_replica_steps(faults, seed):
    """Random failures, drains and reclaims on replicas 0 to 2 (both pools): every request
    ends exactly once, the tables keep their invariants, no replica steps while it is down,
    and a rerun writes the same files."""
    cfg = copy.deepcopy(_loaded_pools())
    cfg["faults"] = faults
    cfg["seed"] = seed
    result = simulate(cfg)
    summary = result.summary
    assert_ends_once(result, 80)
    for event in result.faults.to_pylist():
        if event["down_s"] is not None:
            up = math.inf if event["up_s"] is None else event["up_s"]
            assert_no_step_while_down(result, event, up)
    assert set(summary["faults"]["by_pool"]) == {"prefill", "decode"}
    again = simulate(copy.deepcopy(cfg))
    assert again.requests.equals(result.requests) and again.steps.equals(result.steps)
    assert again.faults.equals(result.faults) and again.summary == summary
