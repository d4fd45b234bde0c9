"""The stability verdict (sim/output/stability.py): exact small tables, and whole runs of a
D/D/1 and an M/D/1 queue at known loads."""

from __future__ import annotations

import time

import numpy as np
import pytest

from sim.config.compose import compose_config
from sim.output.stability import stability
from sim.output.summary_table import format_summary
from sim.run import simulate


def _columns(arrival, completion, delay, status=None, e2e=None, ids=None):
    arrival = np.asarray(arrival, dtype=float)
    completion = np.asarray(completion, dtype=float)
    table = {
        "request_id": np.arange(len(arrival)) if ids is None else np.asarray(ids),
        "arrival_time_s": arrival,
        "completion_time_s": completion,
        "queueing_delay_s": np.asarray(delay, dtype=float),
        "e2e_s": completion - arrival if e2e is None else np.asarray(e2e, dtype=float),
        "status": np.asarray(
            ["completed"] * len(arrival) if status is None else status, dtype=object
        ),
    }
    return table.__getitem__


def _dd1(gap_s: float, service_s: float, n: int):
    """A single server, arrivals every gap_s, each served in service_s, first come first
    served: (arrival, completion, queueing delay) per request."""
    arrival = np.arange(n) * gap_s
    start = np.empty(n)
    free = 0.0
    for i, a in enumerate(arrival):
        start[i] = max(a, free)
        free = start[i] + service_s
    return arrival, start + service_s, start - arrival


def test_a_fleet_that_keeps_up_is_stable_with_no_capacity_shown():
    out = stability(_columns(*_dd1(1.0, 0.5, 200)), warmup_requests=0, paced_by_client=False)
    assert out["verdict"] == "stable"
    assert out["served_share"] == pytest.approx(1.0, abs=0.02)  # the last is in service
    assert out["queueing_delay_slope"] == 0.0
    assert out["service_capacity_requests_per_s"] is None
    assert out["offered_requests_per_s"] == pytest.approx(1.0, rel=0.02)


def test_twice_the_capacity_is_unstable_and_the_capacity_is_measured():
    # arrivals every 0.5 s, one served per second: the wait grows 1 s per 2 s of arrivals
    arrival, completion, delay = _dd1(0.5, 1.0, 400)
    out = stability(_columns(arrival, completion, delay), warmup_requests=0, paced_by_client=False)
    assert out["verdict"] == "unstable"
    assert out["queueing_delay_slope"] == pytest.approx(1.0)  # offered / capacity - 1
    assert out["served_share"] == pytest.approx(0.5, abs=0.01)
    assert out["service_capacity_requests_per_s"] == pytest.approx(1.0, rel=0.01)
    assert "grow with the run's length" in out["reason"]


def test_eight_percent_over_capacity_is_near_saturation():
    arrival, completion, delay = _dd1(1.0 / 1.08, 1.0, 2000)
    out = stability(_columns(arrival, completion, delay), warmup_requests=0, paced_by_client=False)
    assert out["verdict"] == "near_saturation"
    assert out["queueing_delay_slope"] == pytest.approx(0.08, rel=0.01)
    assert out["service_capacity_requests_per_s"] == pytest.approx(1.0, rel=0.01)


def test_a_growing_batch_without_a_wait_queue_is_caught_by_the_served_share():
    # every request admitted at once (no queueing delay) but each stays longer than the last:
    # request i completes at 10 + 2 i while they arrive one per second
    n = 200
    arrival = np.arange(n, dtype=float)
    completion = 10 + 2.0 * arrival
    out = stability(
        _columns(arrival, completion, np.zeros(n)), warmup_requests=0, paced_by_client=False
    )
    assert out["queueing_delay_slope"] == 0.0
    assert out["served_share"] == pytest.approx(0.5, abs=0.02)
    assert out["verdict"] == "unstable"
    # it never completed more than one request per 2 s, and one arrives every second
    assert out["service_capacity_requests_per_s"] == pytest.approx(0.5, abs=0.02)


def test_a_long_stay_beside_a_short_window_is_undetermined_not_unstable():
    # 100 requests in 10 s, each staying 30 s with no wait: nothing completes in the window,
    # but the fleet later completes them as fast as they came; too short a run to judge
    n = 100
    arrival = np.linspace(0, 10, n)
    out = stability(
        _columns(arrival, arrival + 30, np.zeros(n)), warmup_requests=0, paced_by_client=False
    )
    assert out["served_share"] == 0.0 and out["deficit"] <= 1
    assert out["verdict"] == "undetermined" and "run longer" in out["reason"]


def test_unfinished_requests_beyond_what_is_in_flight_make_a_run_unstable():
    arrival, completion, delay = _dd1(1.0, 0.5, 60)
    status = ["completed"] * 40 + ["unfinished"] * 20
    completion[40:] = np.nan
    out = stability(
        _columns(arrival, completion, delay, status=status),
        warmup_requests=0,
        paced_by_client=False,
    )
    # 20 left when a stable run holds about none: the fleet did not keep up
    assert out["verdict"] == "unstable" and out["unfinished_share"] == pytest.approx(1 / 3)
    # the same twenty as warm-ups (the first ids) are not judged
    ids = np.r_[np.arange(20, 60), np.arange(20)]
    out = stability(
        _columns(arrival, completion, delay, status=status, ids=ids),
        warmup_requests=20,
        paced_by_client=False,
    )
    assert out["unfinished_share"] == 0.0 and out["verdict"] == "stable"


def test_rejected_requests_are_not_a_backlog():
    arrival, completion, delay = _dd1(1.0, 0.5, 200)
    status = ["completed", "rejected"] * 100
    completion[1::2] = np.nan
    delay[1::2] = np.nan
    out = stability(
        _columns(arrival, completion, delay, status=status),
        warmup_requests=0,
        paced_by_client=False,
    )
    assert out["verdict"] == "stable" and out["served_share"] == pytest.approx(1.0, abs=0.03)


def test_a_horizon_in_the_middle_of_a_stable_run_leaves_it_stable():
    # 30 s stays, a request a second, cut at 150 s: about 30 in flight, as a stable run holds
    n = 150
    arrival = np.arange(n, dtype=float)
    completion = arrival + 30
    status = np.where(completion <= 150, "completed", "unfinished")
    completion[status == "unfinished"] = np.nan
    out = stability(
        _columns(arrival, completion, np.zeros(n), status=status, e2e=np.full(n, 30.0)),
        warmup_requests=0,
        paced_by_client=False,
    )
    assert out["verdict"] == "stable", out


def test_too_few_arrivals_to_judge_are_stable_and_say_so():
    out = stability(_columns(*_dd1(0.5, 1.0, 10)), warmup_requests=0, paced_by_client=False)
    assert out["verdict"] == "stable" and "too few to judge" in out["reason"]


# one replica serving one request per step of 10 ms: requests of one output token are each
# one step, so the replica is a single server with deterministic service
ONE_STEP = [
    "fleet.replicas=1",
    "step_time=constant",
    "step_time.seconds=0.01",
    "scheduler.max_num_seqs=1",
    "workload.prompt_tokens=16",
    "workload.output_tokens=1",
    "sim.progress=false",
]


@pytest.mark.parametrize(
    "load, verdict",
    [(0.5, "stable"), (1.08, "near_saturation"), (2.0, "unstable"), (100.0, "unstable")],
)
def test_whole_runs_at_known_loads(load, verdict):
    cfg = compose_config(
        [
            *ONE_STEP,
            "workload=constant",
            "workload.num_requests=2000",
            f"workload.qps={load / 0.01}",
        ]
    )
    started = time.perf_counter()
    result = simulate(cfg)
    elapsed = time.perf_counter() - started
    out = result.summary["stability"]
    assert out["verdict"] == verdict, out
    if verdict != "stable":
        # saturated: it served one request per step, 100 per second
        assert out["service_capacity_requests_per_s"] == pytest.approx(100, rel=0.02)
    assert elapsed < 30  # an overloaded run ends: its work is bounded by its requests
    table = format_summary(result.summary, result.config)
    assert f"stability:  {verdict}" in table
    assert ("(unstable: these grow with the run's length)" in table) == (verdict == "unstable")


def test_an_md1_queue_at_60_percent_is_stable():
    cfg = compose_config(
        [*ONE_STEP, "workload=poisson", "workload.num_requests=4000", "workload.qps=60"]
    )
    assert simulate(cfg).summary["stability"]["verdict"] == "stable"


def test_a_closed_loop_is_paced_by_its_clients():
    cfg = compose_config(
        [*ONE_STEP, "workload=closed_loop", "workload.num_requests=200", "workload.concurrency=8"]
    )
    out = simulate(cfg).summary["stability"]
    assert out["paced_by_client"] and out["verdict"] == "stable"
    assert "the client waits for the fleet" in out["reason"]


@pytest.mark.parametrize("scale", [25, 30])
def test_the_default_run_overloaded_stays_unstable_as_requests_stay_longer(scale):
    # overload makes requests stay longer than the judged half: the growing wait still says
    # unstable (never undetermined, which would hide it)
    cfg = compose_config([f"workload.rate_scale={scale}", "sim.progress=false"])
    assert simulate(cfg).summary["stability"]["verdict"] == "unstable"
