"""Is the fleet keeping up? The stability verdict of a run, from its request times alone.

A run whose fleet cannot serve the traffic has no steady state: its backlog grows as long as
traffic comes, and its latencies grow with the run's length. Such latencies are not the
fleet's; they say how long the run was. So every summary carries a ``stability`` object,
judged on the second half of the arrival window (the first half lets the backlog fill;
rejected requests and a benchmark's warm-ups are left out):

- ``offered_requests_per_s``: the judged half's arrivals over its length ``H``.
- ``service_capacity_requests_per_s`` (reported when the fleet falls short): the most the
  fleet completed in any stretch of length ``H``, anywhere in the run (every window starting
  at a completion): what it showed it can do while work was waiting.
- ``deficit``: the judged half's arrivals minus that best window's completions: what a fleet
  working at its best pace for as long would leave behind.

The rule, in order:

- ``unstable``: a deficit of 10% of the half's arrivals or more, and at least 10 requests and
  three standard deviations of the half's arrival count (``sqrt(arrivals)``, as for Poisson
  arrivals): more arrives than the fleet ever served, beyond chance. 10% is a fleet at 1.11
  times its capacity or more. Or, in a run whose median request stays no longer than the
  half, the backlog (counted at 50 instants) gaining as much over the half, beyond 4.2 times
  its scatter around that trend and three standard deviations of the arrivals (an engine that
  batches everything completes faster as it falls behind, which hides the deficit). Or the
  wait before the first step (queueing delay) growing 0.1 s per second of arrivals and 0.5 s
  over the half. Or a horizon that left more requests unfinished than 10% of the run and twice
  the backlog at mid-run (more than a stable fleet has in flight).
- ``undetermined``: no request completed before a horizon; or, not unstable, but the median
  request stays (E2E) longer than ``H``: the
  run is too short beside its requests to show a steady state (a burst of long requests, all
  batched at once, completes in bursts that look like capacity); run longer.
- ``near_saturation``: a deficit, or a backlog trend, of 3% of the half's arrivals and two
  standard deviations:
  the fleet serves a little less than arrives. Its latencies depend on the run's length and on
  chance more than usual: run longer, or read them as lower bounds.
- ``stable`` otherwise (also with fewer than 20 arrivals in the half: ``reason`` says so).

The best window is a maximum, so it is biased upward, which keeps a stable run from looking
short of capacity by chance; a near-knee overload of a few percent needs a long run to show.
The evidence also holds ``served_share`` (completions over arrivals in the judged half) and
``queueing_delay_slope`` (least squares of queueing delay on arrival time over the half), which
the verdict does not use: an engine that admits every request into its batch (vLLM) shows
overload as slower tokens rather than a wait queue, and both move by chance in short runs of a
stable queue near capacity. A closed loop or a capped benchmark client (``paced_by_client``)
waits for the fleet before it sends, so its backlog sits in the client and the fleet looks
stable: read its throughput instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from sim.engine.request import REJECTED, UNFINISHED

# the thresholds of the rule (module docstring)
UNSTABLE_DEFICIT = 0.1  # of the judged half's arrivals
NEAR_DEFICIT = 0.03
UNSTABLE_SIGMAS = 3.0
NEAR_SIGMAS = 2.0
MIN_DEFICIT = 10  # requests
UNFINISHED_SHARE = 0.1
MIN_ARRIVALS = 20  # in the judged half
BACKLOG_SAMPLES = 50  # instants the backlog is counted at over the judged half
WAIT_SLOPE = 0.1  # seconds of queueing delay per second of arrivals
WAIT_GROWTH_S = 0.5  # ... growing by at least this over the judged half


def stability(
    column: Callable[[str], np.ndarray], *, warmup_requests: int, paced_by_client: bool
) -> dict[str, Any]:
    """The ``stability`` object of a run's measured requests (module docstring), from its
    requests table (``column(name)`` gives one column as numpy; one is held at a time, with a
    few masks, so a long run's table need not fit in memory whole)."""
    status = column("status")
    measured = (column("request_id") >= warmup_requests) & (status != REJECTED)
    unfinished = int((status[measured] == UNFINISHED).sum())
    del status
    arrival_s = column("arrival_time_s")[measured]
    n = len(arrival_s)
    out: dict[str, Any] = {
        "verdict": "stable",
        "reason": "",
        "offered_requests_per_s": None,
        "service_capacity_requests_per_s": None,
        "deficit": None,
        "served_share": None,
        "queueing_delay_slope": None,
        "median_stay_s": None,
        "judged_from_s": None,
        "judged_to_s": None,
        "unfinished_share": unfinished / n if n else 0.0,
        "paced_by_client": paced_by_client,
    }
    if n == 0:
        out["reason"] = "no request"
        return out
    first, last = float(arrival_s.min()), float(arrival_s.max())
    mid = (first + last) / 2
    span = last - mid
    out["judged_from_s"], out["judged_to_s"] = mid, last
    in_half = arrival_s > mid
    arrivals = int(in_half.sum())
    half_arrivals = arrival_s[in_half]
    came = np.sort(arrival_s)
    del arrival_s
    completion_s = column("completion_time_s")[measured]
    done = np.sort(completion_s[~np.isnan(completion_s)])
    del completion_s
    # the backlog (arrived, not completed) through the judged half, its trend and its scatter
    times = np.linspace(mid, last, BACKLOG_SAMPLES)
    backlog = (
        np.searchsorted(came, times, side="right") - np.searchsorted(done, times, side="right")
    ).astype(float)
    trend, scatter = 0.0, 0.0
    if span > 0:
        fit = np.polyfit(times - mid, backlog, 1)
        trend = float(fit[0] * span)  # requests the backlog gained over the half
        scatter = float(np.std(backlog - np.polyval(fit, times - mid)))
    done_in_half = int(((done > mid) & (done <= last)).sum())
    backlog_at_mid = (n - arrivals) - int((done <= mid).sum())
    best = 0
    if span > 0 and len(done):
        # completions in [t, t + span) for every t at a completion: the best such stretch
        ends = np.searchsorted(done, done + span, side="left")
        best = int((ends - np.arange(len(done))).max())
    e2e_s = column("e2e_s")[measured]
    e2e_s = e2e_s[~np.isnan(e2e_s)]
    stay_s = float(np.median(e2e_s)) if len(e2e_s) else None
    del e2e_s
    delay_s = column("queueing_delay_s")[measured][in_half]
    seen = ~np.isnan(delay_s)
    if seen.sum() >= MIN_ARRIVALS and span > 0:
        t, d = half_arrivals[seen], delay_s[seen]
        spread = float(((t - t.mean()) ** 2).sum())
        if spread > 0:
            slope = float(((t - t.mean()) * (d - d.mean())).sum() / spread)
            out["queueing_delay_slope"] = slope
    del delay_s, half_arrivals
    out["median_stay_s"] = stay_s
    deficit = arrivals - best
    sigma = math.sqrt(max(arrivals, 1))
    offered = capacity = 0.0
    out["backlog_trend"] = trend
    out["backlog_scatter"] = scatter
    out["backlog_at_mid"] = backlog_at_mid
    # the trend speaks once a request's stay is short beside the half (else it is the fill)
    judged = stay_s is not None and stay_s <= span
    # beyond chance twice over: the scatter around the trend, and the arrivals' own count
    # (a stable queue's backlog wanders like a random walk, which the scatter alone understates)
    grows = judged and trend >= max(
        UNSTABLE_DEFICIT * arrivals, MIN_DEFICIT, 4.2 * scatter, UNSTABLE_SIGMAS * sigma
    )
    creeps = judged and trend >= max(NEAR_DEFICIT * arrivals, 2.8 * scatter, NEAR_SIGMAS * sigma)
    slope = out["queueing_delay_slope"]
    # a wait queue growing by seconds: overload, however long requests stay
    queue_grows = slope is not None and slope >= WAIT_SLOPE and slope * span >= WAIT_GROWTH_S
    if arrivals and span > 0:
        offered, capacity = arrivals / span, best / span
        out["offered_requests_per_s"] = offered
        out["served_share"] = done_in_half / arrivals
        out["deficit"] = deficit
    if unfinished and not len(done):
        out["verdict"] = "undetermined"
        out["reason"] = "no request completed before the run stopped (sim.horizon_s)"
    elif unfinished > max(UNFINISHED_SHARE * n, 2 * backlog_at_mid + MIN_DEFICIT):
        out["verdict"] = "unstable"
        out["reason"] = (
            f"{unfinished:,} requests unfinished when the run stopped, more than a stable "
            f"fleet holds ({backlog_at_mid:,} in the system at mid-run)"
        )
    elif arrivals < MIN_ARRIVALS or span <= 0:
        out["reason"] = f"{arrivals} arrivals in the second half: too few to judge"
    elif deficit >= max(UNSTABLE_DEFICIT * arrivals, MIN_DEFICIT, UNSTABLE_SIGMAS * sigma):
        out["verdict"] = "unstable"
        out["reason"] = (
            f"{offered:.3g} req/s arrive, the fleet never served more than {capacity:.3g} "
            "req/s: the backlog grows, so latencies grow with the run's length"
        )
    elif grows:
        out["verdict"] = "unstable"
        out["reason"] = (
            f"the backlog (waiting and running) grew by {trend:,.0f} requests over the second "
            f"half ({trend / max(arrivals, 1):.0%} of its arrivals), so latencies grow with "
            "the run's length"
        )
    elif queue_grows:
        out["verdict"] = "unstable"
        out["reason"] = (
            f"the wait before the first step grows {slope:.2g} s per second of arrivals: the "
            "queue grows, so latencies grow with the run's length"
        )
    elif stay_s is not None and stay_s > span:
        out["verdict"] = "undetermined"
        out["reason"] = (
            f"a request stays {stay_s:.3g} s, longer than the {span:.3g} s judged: too "
            "short a run to show a steady state; run longer"
        )
    elif creeps or deficit >= max(NEAR_DEFICIT * arrivals, NEAR_SIGMAS * sigma):
        out["verdict"] = "near_saturation"
        out["reason"] = (
            f"{offered:.3g} req/s arrive against a best of {capacity:.3g} req/s, the backlog "
            f"grew by {trend:,.0f}: close to capacity, latencies depend on the run's length"
        )
    else:
        out["reason"] = "the fleet kept up with the second half of the arrivals"
    if out["verdict"] in ("unstable", "near_saturation") and arrivals and span > 0:
        # the best stretch's pace, when the fleet fell short of the arrivals (else it is not
        # the fleet's limit, only what it did)
        out["service_capacity_requests_per_s"] = capacity if deficit > 0 else None
    if paced_by_client:
        out["reason"] += (
            "; the client waits for the fleet before sending (closed loop or a cap), so "
            "an overload queues in the client, not here"
        )
    return out
