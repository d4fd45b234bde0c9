"""Replicas that go (``faults``, ``sim.fleet.faults``): a failure, a maintenance drain and a
spot reclaim worked by hand, under each ``on_failure``; availability against theory; and the
invariants under random fault schedules (every request ends exactly once, KV within the pool,
no step on a replica that is down, the same files on a rerun).

The hand-worked fleet: 4 replicas, round robin, a request every 0.25 s from 0.25 s (request
``i`` arrives at ``0.25 (i + 1)``), 10 prompt tokens and 100 output tokens, every step 10 ms
whatever it holds. A request alone prefills in one step and decodes 99 more: its first token
0.01 s after it starts, its last 1.00 s after. Replica ``r`` serves requests ``r, r + 4, ...``,
one at a time (each ends as the next arrives), its steps on the 10 ms grid from its first
arrival. Fault times fall mid-step (x.xx5 s), so that nothing hangs on how floats round.
"""

from __future__ import annotations

import copy
import functools
import math

import numpy as np
import pytest
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from sim.config.faults import FaultsConfig
from sim.fleet.faults import DOWN, UP, FleetFaults
from sim.output.faults import FaultLog
from sim.run import simulate
from tests.contract import table_problems
from tests.support import columns, compose, option

STEP = 0.01
FLEET = [
    "workload=constant",
    "workload.qps=4",
    "workload.num_requests=40",
    "workload.prompt_tokens=10",
    "workload.output_tokens=100",
    "step_time=constant",
    f"step_time.seconds={STEP}",
    "router=round_robin",
    "fleet.replicas=4",
]


def run(*faults: str):
    return simulate(compose(*FLEET, *faults))


def fault_rows(result) -> list[tuple]:
    """faults.parquet's rows, times rounded to the nanosecond (sums of 10 ms steps)."""
    return [
        tuple(round(v, 9) if isinstance(v, float) else v for v in row.values())
        for row in result.faults.to_pylist()
    ]


def approx(x):
    return pytest.approx(x, abs=1e-9)


def step_spans(result, replica_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Replica ``replica_id``'s steps: their start and end times."""
    steps = columns(result.steps)
    mine = steps["replica_id"] == replica_id
    start = steps["start_time_s"][mine]
    return start, start + steps["duration_s"][mine]


def assert_ends_once(result, requests: int, **table_checks) -> None:
    """Every one of ``requests`` ends exactly once (completed, rejected, unfinished or failed)
    and the tables keep their invariants (``tests.contract.table_problems``)."""
    summary = result.summary
    assert table_problems(result.requests, result.steps, summary, **table_checks) == []
    ended = sum(summary[k] for k in ("completed", "rejected", "unfinished", "failed"))
    assert ended == summary["num_requests"] == requests


def assert_no_step_while_down(result, event: dict, up: float) -> None:
    """No step of ``event``'s replica overlaps its time down, from ``down_s`` to ``up``."""
    start, end = step_spans(result, event["replica_id"])
    assert not ((end > event["down_s"]) & (start < up)).any(), event


def test_a_failure_with_a_request_in_flight_retried():
    """Replica 1 fails at 1.305 s, back 2 s later. It holds request 1 (arrived 0.5 s, first
    token at 0.51 s, 0.805 s in). Round robin has sent 5 requests (its turn counter at 1): the
    retry goes to the up replicas' second, replica 2, which is decoding request 2 in a step
    that ends at 1.31 s. Request 1 then prefills again (1.31 -> 1.32 s: TTFT 0.82 s) and
    decodes 99 steps (E2E 2.31 - 0.5 = 1.81 s); the time lost is 1.305 - 0.5 = 0.805 s. Until
    3.305 s replica 1 takes no request and runs no step (the one under way at 1.305 s is never
    logged)."""
    result = run("faults.schedule=[{replica: 1, at_s: 1.305, repair_s: 2}]")
    assert fault_rows(result) == [(1, "failure", 1.305, 1.305, 3.305, 1, 0)]
    req = columns(result.requests)
    assert req["replica_id"][1] == 2
    assert req["retries"].tolist() == [0, 1] + [0] * 38
    assert req["retry_lost_s"][1] == approx(0.805)
    assert req["first_token_time_s"][1] == approx(1.32)
    assert req["completion_time_s"][1] == approx(2.31)
    assert req["ttft_s"][1] == approx(0.82) and req["e2e_s"][1] == approx(1.81)
    assert set(req["status"].tolist()) == {"completed"}
    # arrivals while it is down go to the three others only
    arrival, replica = req["arrival_time_s"], req["replica_id"]
    assert 1 not in replica[(arrival > 1.305) & (arrival < 3.305)]
    assert 1 in replica[arrival > 3.305]
    steps = columns(result.steps)
    ones = steps["replica_id"] == 1
    start = steps["start_time_s"][ones]
    end = start + steps["duration_s"][ones]
    assert not ((end > 1.305) & (start < 3.305)).any()
    assert end[start < 1.305].max() == approx(1.30)
    summary = result.summary
    assert summary["failed"] == 0 and summary["failed_by_reason"] == {}
    faults = summary["faults"]
    assert (faults["failures"], faults["requests_retried"], faults["retries"]) == (1, 1, 1)
    assert faults["retry_lost_s"] == approx(0.805)
    span = summary["duration_s"]
    assert faults["availability"] == approx(1 - 2.0 / (4 * span))
    assert faults["degraded_s"] == approx(2.0)
    # requests that arrived while degraded: 1.5, 1.75, ..., 3.25 s
    assert faults["degraded"]["requests"] == 8


def test_a_failure_with_a_request_in_flight_failed():
    """The same failure with ``on_failure=fail``: request 1 ends failed at 1.305 s, with its
    replica's cause; it keeps the first token its client had."""
    result = run(
        "faults.schedule=[{replica: 1, at_s: 1.305, repair_s: 2}]", "faults.on_failure=fail"
    )
    assert fault_rows(result) == [(1, "failure", 1.305, 1.305, 3.305, 0, 1)]
    req = columns(result.requests)
    assert req["status"][1] == "failed" and req["fail_reason"][1] == "replica_failure"
    assert math.isnan(req["completion_time_s"][1])
    assert req["first_token_time_s"][1] == approx(0.51)
    summary = result.summary
    assert (summary["completed"], summary["failed"]) == (39, 1)
    assert summary["failed_by_reason"] == {"replica_failure": 1}
    assert summary["completed"] + summary["failed"] + summary["rejected"] == 40


def test_a_maintenance_drain_finishes_what_it_holds():
    """Replica 0 drains from 1.0 s: request 0, which it holds, ends at 1.25 s, when it leaves;
    back 2 s later, at 3.25 s. Nothing is retried; no request arrives there meanwhile."""
    result = run("faults.maintenance=[{replica: 0, at_s: 1.0, duration_s: 2}]")
    assert fault_rows(result) == [(0, "maintenance", 1.0, 1.25, 3.25, 0, 0)]
    req = columns(result.requests)
    assert req["completion_time_s"][0] == approx(1.25)
    arrival, replica = req["arrival_time_s"], req["replica_id"]
    assert 0 not in replica[(arrival > 1.0) & (arrival < 3.25)]
    assert req["retries"].sum() == 0
    assert result.summary["faults"]["maintenance"] == 1


def test_a_maintenance_drain_hands_over_at_its_deadline():
    """With a deadline of 0.105 s, request 0 is handed over at 1.105 s, 0.855 s after its
    arrival, whatever ``on_failure`` says: round robin's turn (1 of the up replicas 1, 2, 3)
    sends it to replica 2, whose step ends at 1.11 s; it prefills to 1.12 s and ends 0.99 s
    later, at 2.11 s. The replica is back at 3.105 s."""
    result = run(
        "faults.maintenance=[{replica: 0, at_s: 1.0, duration_s: 2, deadline_s: 0.105}]",
        "faults.on_failure=fail",
    )
    assert fault_rows(result) == [(0, "maintenance", 1.0, 1.105, 3.105, 1, 0)]
    req = columns(result.requests)
    assert (req["replica_id"][0], req["retries"][0]) == (2, 1)
    assert req["retry_lost_s"][0] == approx(0.855)
    assert req["first_token_time_s"][0] == approx(1.12)
    assert req["completion_time_s"][0] == approx(2.11)


@pytest.mark.parametrize("on_failure", ["retry", "fail"])
def test_a_spot_reclaim_after_its_notice(on_failure):
    """Replica 3 gets a 0.305 s notice at 1.5 s: it takes nothing from then, and is lost at
    1.805 s with request 3 (arrived 1.0 s, due at 2.0 s). Round robin sent requests 5 and 6 to
    replicas 1 and 2 of the three left; request 3 is retried on the next, replica 0, whose step
    ends at 1.81 s (first token 1.82 s, last 2.81 s), or fails (``spot_reclaim``). A
    replacement serves from 2.805 s."""
    result = run(
        "faults.spot=[{replica: 3, at_s: 1.5, notice_s: 0.305, replace_s: 1}]",
        f"faults.on_failure={on_failure}",
    )
    retried = on_failure == "retry"
    assert fault_rows(result) == [(3, "spot", 1.5, 1.805, 2.805, int(retried), int(not retried))]
    req = columns(result.requests)
    arrival, replica = req["arrival_time_s"], req["replica_id"]
    assert 3 not in replica[(arrival >= 1.5) & (arrival < 2.805)]
    if retried:
        assert req["replica_id"][5:7].tolist() == [1, 2]
        assert (req["replica_id"][3], req["status"][3]) == (0, "completed")
        assert req["first_token_time_s"][3] == approx(1.82)
        assert req["completion_time_s"][3] == approx(2.81)
        assert req["retry_lost_s"][3] == approx(0.805)
    else:
        assert (req["status"][3], req["fail_reason"][3]) == ("failed", "spot_reclaim")
        assert result.summary["failed_by_reason"] == {"spot_reclaim": 1}
    assert result.summary["faults"]["spot_reclaims"] == 1


def test_with_every_replica_down_requests_fail_for_want_of_one():
    """A fleet of one, a request every 2 s from 2 s, fails for good at 4.505 s: request 1
    (arrived 4 s) is sent again and finds no replica up, nor does any later arrival: each
    fails at once (``no_replica``), never routed (a null replica)."""
    result = simulate(
        compose(
            *FLEET,
            "fleet.replicas=1",
            "workload.qps=0.5",
            "workload.num_requests=8",
            "faults.schedule=[{replica: 0, at_s: 4.505}]",
        )
    )
    req = columns(result.requests)
    assert req["status"].tolist() == ["completed"] + ["failed"] * 7
    assert req["fail_reason"].tolist()[1:] == ["no_replica"] * 7
    assert req["retries"].tolist() == [0, 1] + [0] * 6
    assert req["retry_lost_s"][1] == approx(0.505)
    assert result.requests.column("replica_id").null_count == 6
    assert result.faults.to_pylist()[0]["up_s"] is None
    assert result.summary["failed_by_reason"] == {"no_replica": 7}
    assert result.summary["faults"]["availability"] == approx(1 - (16.0 - 4.505) / (16.0 - 2.0))


# -- availability against theory ------------------------------------------------------------


class _Idle:
    """A replica that serves nothing: what the fault processes take down and bring back."""

    def __init__(self, replica_id: int) -> None:
        self.replica_id = replica_id
        self.engines: list = []

    def stop(self) -> None: ...

    def restart(self) -> None: ...


class _NoLoad:
    """A fleet with no requests (``sim.fleet.faults.FaultyCluster``), that never finishes."""

    def __init__(self, num_replicas: int) -> None:
        self.env = simpy.Environment()
        self.replicas = [_Idle(i) for i in range(num_replicas)]
        self.request_log = type("Log", (), {"unwritten": []})()

    def stop_routing(self, replica) -> None: ...

    def resume_routing(self, replica) -> None: ...

    def drain(self, replica, on_released) -> None:
        on_released(replica)

    def route(self, request, caller_priority) -> None: ...

    def end_request(self, request, caller_priority) -> None: ...

    def flush_steps(self, replica) -> None: ...

    def finished(self) -> bool:
        return False


def test_availability_matches_mtbf_over_mtbf_plus_mttr():
    """Four replicas of one GPU, MTBF 100 h, exponential repairs of mean 10 h, no load, over
    10^6 hours. Each replica is an alternating renewal process, up a share MTBF / (MTBF +
    MTTR) = 10/11 of the time, independently of the others, so the share of time with at least
    k of 4 up is binomial. Each measured share is checked against theory with a t interval on
    40 batch means (each 25,000 h, some 230 failure cycles per replica: near independent),
    at a false-alarm rate of 0.1% per check."""
    cluster = _NoLoad(4)
    log = FaultLog()
    config = FaultsConfig(gpu_mtbf_h=100.0, repair_h=10.0)
    FleetFaults(cluster, config, [1, 1, 1, 1], seed=7, new_engines=lambda i: [], log=log)
    horizon_s = 1e6 * 3600
    cluster.env.run(until=horizon_s)
    a = 100 / 110
    batches = np.linspace(0, horizon_s, 41)
    up_shares = np.array(
        [
            log.up_count_seconds(lo, hi) / (hi - lo)
            for lo, hi in zip(batches[:-1], batches[1:], strict=True)
        ]
    )  # (batch, k up)
    quantile = stats.t.ppf(1 - 0.001 / 2, df=len(up_shares) - 1)

    def check(per_batch: np.ndarray, theory: float) -> None:
        half = quantile * per_batch.std(ddof=1) / math.sqrt(len(per_batch))
        assert abs(per_batch.mean() - theory) <= half, (per_batch.mean(), theory, half)

    availability = up_shares @ np.arange(5) / 4  # replicas up, on average, of 4
    check(availability, a)
    assert log.availability(0, horizon_s) == pytest.approx(availability.mean())
    for k in (2, 3, 4):
        at_least = sum(math.comb(4, j) * a**j * (1 - a) ** (4 - j) for j in range(k, 5))
        check(up_shares[:, k:].sum(axis=1), at_least)


def test_failures_scale_with_the_replica_gpus_and_use_their_own_streams():
    """A replica of 8 GPUs fails 8 times as often as one of 1 (over 10^5 h at MTBF 1000 h per
    GPU and repairs of 1 h: about 800 failures against 100); each replica's draws are its own,
    so replica 0 fails at the same times in a fleet of 1 as in a fleet of 2."""

    def failures(gpus: list[int], hours: float) -> list[list[float]]:
        cluster = _NoLoad(len(gpus))
        log = FaultLog()
        config = FaultsConfig(gpu_mtbf_h=1000.0, repair_h=1.0, repair="fixed")
        FleetFaults(cluster, config, gpus, seed=3, new_engines=lambda i: [], log=log)
        cluster.env.run(until=hours * 3600)
        return [[e.start_s for e in log.events if e.replica_id == r] for r in range(len(gpus))]

    one, eight = failures([1, 8], 1e5)
    # Poisson counts: within 4 standard deviations of 8 x and 1 x (100 expected)
    assert abs(len(one) - 100) < 4 * 10 and abs(len(eight) - 800) < 4 * math.sqrt(800)
    assert failures([1], 1e4)[0] == failures([1, 1], 1e4)[0]


def test_a_failure_of_a_replica_already_down_is_none():
    """A second scheduled failure while the replica is down changes nothing; a drain of a
    replica that is down is skipped."""
    cluster = _NoLoad(2)
    log = FaultLog()
    config = FaultsConfig(
        schedule=[
            {"replica": 0, "at_s": 10.0, "repair_s": 100.0},
            {"replica": 0, "at_s": 50.0, "repair_s": 5.0},
        ],
        maintenance=[{"replica": 0, "at_s": 60.0, "duration_s": 10.0}],
    )
    faults = FleetFaults(cluster, config, [1, 1], seed=0, new_engines=lambda i: [], log=log)
    cluster.env.run(until=80.0)
    assert faults.state(0) == DOWN and faults.state(1) == UP
    cluster.env.run(until=200.0)
    assert faults.state(0) == UP
    assert [(e.kind, e.start_s, e.down_s, e.up_s) for e in log.events] == [
        ("failure", 10.0, 10.0, 110.0)
    ]


# -- invariants under random fault schedules ------------------------------------------------

KV_BLOCKS = 48  # 768 tokens a replica: preemptions under load


@st.composite
def fault_settings(draw: st.DrawFn) -> dict:
    """The ``faults`` group: up to a few events of each kind on a fleet of 3 replicas, within
    the run's first 3 s, random failures every 7 or 72 s on average, either ``on_failure``."""
    replica = st.integers(0, 2)
    at = st.floats(0.0, 3.0).map(lambda x: round(x, 3))
    span = st.floats(0.01, 2.0).map(lambda x: round(x, 3))
    maybe = st.none() | span
    return {
        "gpu_mtbf_h": draw(st.sampled_from([0.002, 0.02])),
        "repair": draw(st.sampled_from(["exponential", "fixed"])),
        "repair_h": 0.0003,  # about a second
        "on_failure": draw(st.sampled_from(["retry", "fail"])),
        "schedule": draw(
            st.lists(
                st.fixed_dictionaries({"replica": replica, "at_s": at, "repair_s": maybe}),
                max_size=3,
            )
        ),
        "maintenance": draw(
            st.lists(
                st.fixed_dictionaries(
                    {"replica": replica, "at_s": at, "duration_s": span, "deadline_s": maybe}
                ),
                max_size=2,
            )
        ),
        "spot": draw(
            st.lists(
                st.fixed_dictionaries(
                    {"replica": replica, "at_s": at, "notice_s": span, "replace_s": maybe}
                ),
                max_size=2,
            )
        ),
    }


@functools.cache
def _loaded_fleet() -> dict:
    """3 replicas under a load that queues and preempts (a small KV pool), composed once."""
    return compose(
        "workload=poisson",
        "workload.qps=40",
        "workload.num_requests=80",
        "workload.prompt_tokens=100",
        "workload.output_tokens=60",
        "fleet.replicas=3",
        f"kv.num_blocks={KV_BLOCKS}",
    )


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    faults=fault_settings(),
    router=st.sampled_from(["round_robin", "least_outstanding"]),
    seed=st.integers(0, 3),
)
def test_every_request_ends_once_and_no_down_replica_steps(faults, router, seed):
    cfg = copy.deepcopy(_loaded_fleet())
    cfg["faults"] = faults
    cfg["router"] = option("router", router)
    cfg["seed"] = seed
    result = simulate(cfg)
    summary = result.summary
    assert_ends_once(result, 80, kv_blocks_per_model=[KV_BLOCKS])
    for event in result.faults.to_pylist():
        if event["down_s"] is not None:
            up = math.inf if event["up_s"] is None else event["up_s"]
            assert_no_step_while_down(result, event, up)
    again = simulate(copy.deepcopy(cfg))
    assert again.requests.equals(result.requests) and again.steps.equals(result.steps)
    assert again.faults.equals(result.faults) and again.summary == summary


def test_faults_off_is_the_plain_fleet():
    """With ``faults`` at its defaults the registry picks the bare shape: no faults columns,
    file or summary keys (the run's files are those of a run before faults existed)."""
    result = run()
    assert result.faults is None
    assert "retries" not in result.requests.column_names
    assert not {"faults", "failed", "failed_by_reason"} & set(result.summary)
