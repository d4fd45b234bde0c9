"""Faults on an autoscaled fleet (``sim.fleet.faults`` with ``sim.fleet.autoscaler``; the how-to
is docs/how-to/faults.md, "An autoscaled fleet"): a lost replica leaves the autoscaler's fleet
(``scaling.parquet``'s ``failed``) and is replaced after ``autoscale.provision_s``, worked by
hand under each ``on_failure``; a metric policy with every replica out at once; the replicas the
autoscaler adds fail from their own streams; events naming no replica of the fleet at their
time; and the invariants (every request ends once, no step on a replica that is down or gone).

The hand-worked fleet is tests/fleet/test_faults.py's: 4 replicas, round robin, a request every
0.25 s from 0.25 s, 10 prompt and 100 output tokens, 10 ms steps (a request alone: first token
0.01 s after it starts, last 1.00 s after), replica ``r`` serving requests ``r, r + 4, ...`` one
at a time; here held at 4 replicas by an autoscaler's schedule, which provisions in 2 s.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim import rng
from sim.errors import ConfigError
from sim.output.results import FAULT_COLUMNS
from sim.run import simulate
from tests.fleet.test_faults import (
    FLEET,
    approx,
    assert_ends_once,
    assert_no_step_while_down,
    fault_rows,
    fault_settings,
    step_spans,
)
from tests.support import columns, compose

AUTOSCALED = [
    *FLEET,
    "autoscale.policy=schedule",
    "autoscale.schedule=[{at_s: 0, replicas: 4}]",
    "autoscale.provision_s=2",
]
FAIL_1 = "faults.schedule=[{replica: 1, at_s: 1.305}]"


def scaling_rows(result) -> list[tuple]:
    """scaling.parquet's (time, event, ready, provisioning, GPUs, replica) rows."""
    c = columns(result.scaling)
    return list(
        zip(
            c["time_s"].round(9).tolist(),
            c["event"].tolist(),
            c["replicas_ready"].tolist(),
            c["replicas_provisioning"].tolist(),
            c["gpus_billed"].tolist(),
            [None if math.isnan(r) else int(r) for r in c["replica_id"].tolist()],
            strict=True,
        )
    )


def ready_times(result) -> dict[int, float]:
    """When each replica was ready: the fleet's 4 at time 0, each added one at its ``ready``."""
    scaling = columns(result.scaling)
    ready_at = {r: 0.0 for r in range(4)}
    for time_s, event, replica in zip(
        scaling["time_s"], scaling["event"], scaling["replica_id"], strict=True
    ):
        if event == "ready":
            ready_at[int(replica)] = float(time_s)
    return ready_at


def first_starts(events: list[dict]) -> dict[int, float]:
    """Each replica's first fault event's start (faults.parquet's rows in time order)."""
    first: dict[int, float] = {}
    for event in events:
        first.setdefault(event["replica_id"], event["start_s"])
    return first


def failed_replicas(result) -> list[int]:
    """The replicas scaling.parquet's ``failed`` rows name, sorted."""
    scaling = columns(result.scaling)
    return sorted(scaling["replica_id"][scaling["event"] == "failed"].astype(int).tolist())


@pytest.mark.parametrize("on_failure", ["retry", "fail"])
def test_a_lost_replica_is_replaced_after_the_provisioning_delay(on_failure):
    """Replica 1 fails at 1.305 s holding request 1 (arrived 0.5 s). The autoscaler's fleet
    shrinks at once (``failed``: 3 ready, 3 GPUs billed) and asks for a replacement at once
    (``scale_up``: 1 provisioning, 4 GPUs), ready 2 s later, at 3.305 s, as replica 4. Replica 1
    never comes back: it runs no step after 1.30 s. Its failure's ``up_s`` is the replacement's
    readiness. Retried, request 1 goes where it goes on a fixed fleet (replica 2: first token
    1.32 s, last 2.31 s, 0.805 s lost); failed, it ends with ``replica_failure``. The
    replacement takes its first request at the first arrival after 3.305 s that round robin
    gives it (the up replicas 0, 2, 3, 4 in id order): request 15 at 4.0 s after a retry
    (request 1's retry moved round robin's turn), request 13 at 3.5 s otherwise.

    Availability counts replica 1 down from its loss to its replacement (2 s) over the 4
    replicas planned: 1 - 2 / (4 x span), as on a fixed fleet repaired in 2 s."""
    result = simulate(compose(*AUTOSCALED, FAIL_1, f"faults.on_failure={on_failure}"))
    retried = on_failure == "retry"
    assert scaling_rows(result) == [
        (0.0, "start", 4, 0, 4, None),
        (1.305, "failed", 3, 0, 3, 1),
        (1.305, "scale_up", 3, 1, 4, None),
        (3.305, "ready", 4, 0, 4, 4),
    ]
    assert fault_rows(result) == [(1, "failure", 1.305, 1.305, 3.305, int(retried), 1 - retried)]
    req = columns(result.requests)
    if retried:
        assert req["replica_id"][1] == 2 and req["retries"][1] == 1
        assert req["first_token_time_s"][1] == approx(1.32)
        assert req["completion_time_s"][1] == approx(2.31)
        assert req["retry_lost_s"][1] == approx(0.805)
        assert set(req["status"].tolist()) == {"completed"}
    else:
        assert (req["status"][1], req["fail_reason"][1]) == ("failed", "replica_failure")
        assert result.summary["failed_by_reason"] == {"replica_failure": 1}
    first = 15 if retried else 13
    replica = req["replica_id"]
    assert 4 not in replica[:first] and replica[first] == 4
    assert req["arrival_time_s"][first] == approx(0.25 * (first + 1))
    start, end = step_spans(result, 1)
    assert end.max() == approx(1.30)
    start, _ = step_spans(result, 4)
    assert start.min() == approx(0.25 * (first + 1))
    summary = result.summary
    assert summary["faults"]["availability"] == approx(1 - 2.0 / (4 * summary["duration_s"]))
    assert summary["autoscale"]["scale_ups"] == 1 and summary["autoscale"]["replicas_min"] == 3


def test_a_metric_policy_with_every_replica_out_reads_no_metric():
    """One replica under the concurrency policy (a look every 0.5 s), a request every 1.25 s
    from 1.25 s, each 1 s long. The replica fails at 2.805 s holding request 1 (arrived 2.5 s):
    with no replica serving, the policy has no metric to read (no division by zero) and asks
    for nothing; the replacement asked for at the loss is ready at 4.805 s (replica 1).
    Request 1, retried, finds no replica (``no_replica``: 1 retry, 0.305 s lost), nor does
    request 2 (3.75 s); requests 3 and 4 (5.0 and 6.25 s) complete on the replacement, the
    last at 7.25 s. Availability: the 2 s without a replica over the span 1.25 -> 7.25 s."""
    result = simulate(
        compose(
            *FLEET,
            "fleet.replicas=1",
            "workload.qps=0.8",
            "workload.num_requests=5",
            "autoscale.policy=concurrency",
            "autoscale.interval_s=0.5",
            "autoscale.provision_s=2",
            "faults.schedule=[{replica: 0, at_s: 2.805}]",
        )
    )
    assert [row[:2] + row[-1:] for row in scaling_rows(result)] == [
        (0.0, "start", None),
        (2.805, "failed", 0),
        (2.805, "scale_up", None),
        (4.805, "ready", 1),
    ]
    req = columns(result.requests)
    assert req["status"].tolist() == ["completed", "failed", "failed", "completed", "completed"]
    assert req["fail_reason"].tolist()[1:3] == ["no_replica"] * 2
    assert req["retries"].tolist() == [0, 1, 0, 0, 0]
    assert req["retry_lost_s"][1] == approx(0.305)
    assert req["replica_id"][3:].tolist() == [1, 1]
    assert req["completion_time_s"][4] == approx(7.25)
    assert result.summary["faults"]["availability"] == approx(1 - 2.0 / 6.0)


def test_events_naming_no_replica_of_the_fleet_then_are_none():
    """Replica 9 never exists (the fleet holds 4, and one replacement: ids 0 to 4); replica 1
    is gone by 2 s (lost at 1.305 s): a failure of 9, and a maintenance drain and a spot
    notice of 1 after its loss, change nothing. The run is the one with replica 1's loss
    alone."""
    alone = simulate(compose(*AUTOSCALED, FAIL_1))
    result = simulate(
        compose(
            *AUTOSCALED,
            "faults.schedule=[{replica: 1, at_s: 1.305}, {replica: 9, at_s: 2.0}]",
            "faults.maintenance=[{replica: 1, at_s: 2.0, duration_s: 1}]",
            "faults.spot=[{replica: 1, at_s: 2.5}]",
        )
    )
    assert fault_rows(result) == fault_rows(alone)
    assert result.requests.equals(alone.requests) and result.steps.equals(alone.steps)
    assert result.scaling.equals(alone.scaling)


SCALE_DOWN = [
    *(a for a in AUTOSCALED if not a.startswith("autoscale.schedule")),
    "autoscale.schedule=[{at_s: 0, replicas: 4}, {at_s: 1.6, replicas: 3}]",
]


def test_a_replica_the_autoscaler_drains_is_lost_but_not_replaced():
    """The schedule drains one replica at 1.6 s: all four hold one request, so the highest id,
    replica 3 (request 3, due at 2.0 s). It fails at 1.805 s: lost with request 3 (``failed``:
    3 ready, none draining, 3 GPUs), not replaced (it was leaving), and never released. Request
    3 is retried on replica 0 (round robin's turn among 0, 1, 2), whose step ends at 1.81 s:
    last token at 2.81 s. A maintenance drain or a spot notice of it while it drains is none:
    the run is the drain alone, replica 3 released at 2.0 s."""
    result = simulate(compose(*SCALE_DOWN, "faults.schedule=[{replica: 3, at_s: 1.805}]"))
    assert scaling_rows(result) == [
        (0.0, "start", 4, 0, 4, None),
        (1.6, "drain", 3, 0, 4, 3),
        (1.805, "failed", 3, 0, 3, 3),
    ]
    assert fault_rows(result) == [(3, "failure", 1.805, 1.805, None, 1, 0)]
    req = columns(result.requests)
    assert (req["replica_id"][3], req["retries"][3]) == (0, 1)
    assert req["completion_time_s"][3] == approx(2.81)
    plain = simulate(compose(*SCALE_DOWN))
    assert scaling_rows(plain)[-1] == (2.0, "released", 3, 0, 3, 3)
    for event in (
        "faults.maintenance=[{replica: 3, at_s: 1.8, duration_s: 1}]",
        "faults.spot=[{replica: 3, at_s: 1.8}]",
    ):
        result = simulate(compose(*SCALE_DOWN, event))
        assert result.faults.num_rows == 0
        assert result.requests.drop_columns([n for n, _ in FAULT_COLUMNS]).equals(plain.requests)
        assert result.scaling.equals(plain.scaling)


def test_a_maintenance_drain_keeps_the_replica_in_the_fleet():
    """Replica 0 drains from 1.0 s (request 0 ends at 1.25 s, when it leaves) and is back,
    as replica 0, 2 s later: nothing is replaced, the scaling log holds no change, and the
    replica takes requests again after 3.25 s."""
    result = simulate(
        compose(*AUTOSCALED, "faults.maintenance=[{replica: 0, at_s: 1.0, duration_s: 2}]")
    )
    assert fault_rows(result) == [(0, "maintenance", 1.0, 1.25, 3.25, 0, 0)]
    assert scaling_rows(result) == [(0.0, "start", 4, 0, 4, None)]
    req = columns(result.requests)
    arrival, replica = req["arrival_time_s"], req["replica_id"]
    assert 0 not in replica[(arrival > 1.0) & (arrival < 3.25)]
    assert 0 in replica[arrival > 3.25]


def test_a_spot_reclaim_is_replaced_by_the_autoscaler():
    """Replica 3's notice at 1.5 s, lost at 1.805 s with request 3 (retried on replica 0, as
    on a fixed fleet: tests/fleet/test_faults.py); the autoscaler's replacement, replica 4, is
    ready 2 s after the loss."""
    reclaim = "faults.spot=[{replica: 3, at_s: 1.5, notice_s: 0.305}]"
    result = simulate(compose(*AUTOSCALED, reclaim))
    assert fault_rows(result) == [(3, "spot", 1.5, 1.805, 3.805, 1, 0)]
    assert [row[:2] + row[-1:] for row in scaling_rows(result)] == [
        (0.0, "start", None),
        (1.805, "failed", 3),
        (1.805, "scale_up", None),
        (3.805, "ready", 4),
    ]
    req = columns(result.requests)
    assert (req["replica_id"][3], req["status"][3]) == (0, "completed")
    assert req["completion_time_s"][3] == approx(2.81)


def test_replicas_added_later_fail_from_their_own_streams():
    """Random failures (a GPU's MTBF of 5 s) on the autoscaled fleet, provisioning in 1 s:
    every replica, there at time 0 or added to replace a lost one, first fails its first
    uptime draw after it is ready, from its own stream (``faults.uptime.<id>``), as long as
    the run goes on. Replacements fail too (the test sees one at least); every request ends
    exactly once; no replica steps while down or after it is lost; a rerun is the same."""
    seed = 5
    overrides = [
        *AUTOSCALED,
        "autoscale.provision_s=1",
        f"faults.gpu_mtbf_h={5 / 3600}",
        f"seed={seed}",
    ]
    result = simulate(compose(*overrides))
    ready_at = ready_times(result)
    events = result.faults.to_pylist()
    first = first_starts(events)
    assert set(first) <= set(ready_at)
    assert any(r >= 4 for r in first), "no replacement failed: the test proves nothing"
    for replica, start_s in first.items():
        draw = rng.stream(seed, f"faults.uptime.{replica}").exponential(5.0)
        assert start_s == approx(ready_at[replica] + draw)
    # every failure is a loss: each one shows in the scaling log, and has no repair of its own
    assert failed_replicas(result) == sorted(e["replica_id"] for e in events)
    assert_ends_once(result, 40)
    for event in events:
        assert_no_step_while_down(result, event, math.inf)  # a lost one never steps again
    again = simulate(compose(*overrides))
    assert again.requests.equals(result.requests) and again.faults.equals(result.faults)
    assert again.scaling.equals(result.scaling)


SCHEDULE = (
    "autoscale.schedule=[{at_s: 0, replicas: 3}, {at_s: 1, replicas: 2}, {at_s: 2, replicas: 4}]"
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    faults=fault_settings(),
    policy=st.sampled_from(["concurrency", "queue", "schedule"]),
    seed=st.integers(0, 3),
)
def test_every_request_ends_once_under_random_faults_and_scaling(faults, policy, seed):
    """Random failures, drains and reclaims (no repairs or replacements of the faults' own:
    the autoscaler's) on a fleet that a metric policy (a look every 0.2 s, provisioning in
    0.3 s) or a schedule scales: every request ends exactly once, the tables keep their
    invariants, no replica steps while down or after it is lost, every replica lost (one
    loss may close two events: a failure during a reclaim notice) is one ``failed`` row of
    the scaling log, and a rerun writes the same files."""
    faults = {
        **faults,
        "schedule": [{**e, "repair_s": None} for e in faults["schedule"]],
        "spot": [{**e, "replace_s": None} for e in faults["spot"]],
    }
    cfg = compose(
        "workload=poisson",
        "workload.qps=40",
        "workload.num_requests=80",
        "workload.prompt_tokens=100",
        "workload.output_tokens=60",
        "fleet.replicas=3",
        "kv.num_blocks=48",
        f"autoscale.policy={policy}",
        "autoscale.target=2",
        "autoscale.interval_s=0.2",
        "autoscale.scale_down_window_s=0.5",
        "autoscale.provision_s=0.3",
        "autoscale.max_replicas=5",
        SCHEDULE if policy == "schedule" else "autoscale.schedule=null",
    )
    cfg["faults"] = faults
    cfg["seed"] = seed
    result = simulate(cfg)
    assert_ends_once(result, 80)
    lost = []
    for event in result.faults.to_pylist():
        if event["down_s"] is None:
            continue
        if event["kind"] != "maintenance":
            lost.append(event["replica_id"])
        up = math.inf if event["up_s"] is None or event["kind"] != "maintenance" else event["up_s"]
        assert_no_step_while_down(result, event, up)
    assert sorted(set(lost)) == failed_replicas(result)
    again = simulate(copy.deepcopy(cfg))
    assert again.requests.equals(result.requests) and again.steps.equals(result.steps)
    assert again.faults.equals(result.faults) and again.scaling.equals(result.scaling)


@pytest.mark.parametrize("fleet_replicas", [4, 2, 6])
def test_an_autoscaled_fleet_bought_spot_has_its_added_replicas_reclaimed(fleet_replicas):
    """``cost.tier=spot`` buys every replica spot, those the autoscaler adds too: with
    reclaims every 5 s on average (``faults.spot_reclaims_per_h``) and a 0.1 s notice, each
    replica's first notice is its first draw from its own stream (``faults.reclaim.<id>``)
    after it is ready, replacements' included; each loss is a ``failed`` row the autoscaler
    replaces; every request ends once, and a rerun is the same. A replacement time of the
    faults' own is refused there (the autoscaler replaces). The fleet at time 0 is the
    schedule's first count (4), whatever ``fleet.replicas`` says: its 4 replicas are reclaimed
    from time 0, those added from when they are ready, each once."""
    seed = 3
    overrides = [
        *AUTOSCALED,
        f"fleet.replicas={fleet_replicas}",
        "autoscale.provision_s=1",
        "cost.tier=spot",
        f"faults.spot_reclaims_per_h={3600 / 5}",
        "faults.spot_notice_s=0.1",
        f"seed={seed}",
    ]
    result = simulate(compose(*overrides))
    ready_at = ready_times(result)
    events = result.faults.to_pylist()
    assert {e["kind"] for e in events} == {"spot"}
    first = first_starts(events)
    assert any(r >= 4 for r in first), "no added replica was reclaimed: the test proves nothing"
    end_s = float(np.nanmax(columns(result.requests)["completion_time_s"]))
    for replica in range(4):  # the fleet at time 0: each reclaimed at its first draw
        draw = rng.stream(seed, f"faults.reclaim.{replica}").exponential(5.0)
        assert draw > end_s or first[replica] == approx(draw)
    for replica, start_s in first.items():
        draw = rng.stream(seed, f"faults.reclaim.{replica}").exponential(5.0)
        assert start_s == approx(ready_at[replica] + draw)
        assert next(e for e in events if e["replica_id"] == replica)["down_s"] == approx(
            start_s + 0.1
        )
    assert failed_replicas(result) == sorted(e["replica_id"] for e in events)
    assert_ends_once(result, 40)
    again = simulate(compose(*overrides))
    assert again.requests.equals(result.requests) and again.faults.equals(result.faults)
    with pytest.raises(ConfigError, match="faults.spot_replace_s"):
        simulate(compose(*overrides, "faults.spot_replace_s=5"))
