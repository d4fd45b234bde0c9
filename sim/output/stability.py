"""Is the fleet keeping up? The stability verdict of a run, from its request times alone.

A run whose fleet cannot serve the traffic has no steady state: its backlog grows as long as
traffic comes, and its latencies grow with the run's length. Such latencies are not the
fleet's; they say how long the run was. So every summary carries a ``stability`` object,
judged on the second half of the arrival window, ``H = [mid, last arrival]`` (the first half
lets the backlog fill from empty), from two pieces of evidence:

- ``served_share`` = requests completed during H / requests arriving during H. The backlog
  (arrived, not completed: waiting or in the running batch) changes over H by exactly
  ``arrivals - completions`` (``backlog_growth``), so ``1 - served_share`` is the share of H's
  arrivals that piled up: near 0 for a stable fleet, ``1 - capacity/offered`` for an
  overloaded one. It means something only when a request's stay is short beside H: it is
  judged (``served_share_judged``) when the median E2E of the first quarter's arrivals (the
  stay before any backlog) is at most half of H.
- ``queueing_delay_slope``: the least-squares slope of queueing delay against arrival time
  over H (seconds of wait per second of arrivals): 0 for a stable fleet, ``offered/capacity -
  1`` for a FIFO wait queue in front of an overloaded one. It holds however long the stay.

The rule, in order:

- ``unstable``: 10% or more of the measured requests unfinished when the run stopped (a
  horizon cut them off); or a judged ``served_share < 0.9`` with a backlog growth of at least
  10 requests and 3 sigma; or ``queueing_delay_slope >= 0.1`` with a growth over H of 50 ms or
  more. 0.9 and 0.1 both mean arrivals 10% or more above what the fleet serves. Sigma is the
  chance movement of a stable backlog over the half, about ``sqrt(2 x backlog_at_mid)`` (the
  number in the system is roughly Poisson when every request is in the running batch), so a
  short run whose backlog wanders is not called unstable; the 10 requests and 50 ms keep tiny
  runs' noise, or a trend of a few steps' time, from counting.
- ``near_saturation``: not unstable, but a judged ``served_share < 0.97`` with a growth of 2
  sigma, or a slope of 0.03 or more (with 50 ms of growth): the backlog grows, if slowly.
  Its latencies depend on the run's length and on chance more than usual: run longer, or read
  them as lower bounds.
- ``stable`` otherwise (also with fewer than 20 arrivals in H, where ``reason`` says so).

An engine that admits every request into its running batch (vLLM, until KV or
``max_num_seqs`` stops it) has no waiting queue: its overload shows as a growing batch, with
slower tokens, not as queueing delay, which is what ``served_share`` catches. A closed loop or
a capped benchmark client (``paced_by_client``) waits for the fleet before it sends, so its
backlog sits in the client and the fleet looks stable: read its throughput instead.

``offered_requests_per_s`` and ``served_requests_per_s`` are H's arrival and completion rates;
``service_capacity_requests_per_s`` is, when the fleet is saturated (not ``stable``), the
run's mean completion rate from its first arrival to its last completion, the most it served;
a stable fleet never showed its capacity (null).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from sim.engine.request import UNFINISHED

# the thresholds of the rule (module docstring)
UNSTABLE_SHARE = 0.9
NEAR_SHARE = 0.97
MIN_BACKLOG_GROWTH = 10  # requests
UNFINISHED_SHARE = 0.1
UNSTABLE_SLOPE = 0.1  # seconds of queueing delay per second of arrivals
NEAR_SLOPE = 0.03
MIN_DELAY_GROWTH_S = 0.05
MIN_ARRIVALS = 20  # in the judged half


def _mean(values: np.ndarray) -> float | None:
    values = values[~np.isnan(values)]
    return float(values.mean()) if len(values) else None


def stability(
    column: Callable[[str], np.ndarray], *, warmup_requests: int, paced_by_client: bool
) -> dict[str, Any]:
    """The ``stability`` object of a run's measured requests (module docstring), from its
    requests table (``column(name)`` gives one column as numpy; one is held at a time, with a
    few masks, so a long run's table need not fit in memory whole). A benchmark client's
    warm-ups (the first ``warmup_requests`` ids) are left out."""
    measured = column("request_id") >= warmup_requests
    unfinished = int((column("status")[measured] == UNFINISHED).sum())
    arrival_s = column("arrival_time_s")[measured]
    n = len(arrival_s)
    out: dict[str, Any] = {
        "verdict": "stable",
        "reason": "",
        "offered_requests_per_s": None,
        "served_requests_per_s": None,
        "service_capacity_requests_per_s": None,
        "served_share": None,
        "backlog_growth": None,
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
    in_half = (arrival_s > mid) & (arrival_s <= last)
    early = arrival_s <= first + (last - first) / 4
    arrivals = int(in_half.sum())
    arrived_by_mid = int((arrival_s <= mid).sum())
    half_arrivals = arrival_s[in_half]
    del arrival_s
    completion_s = column("completion_time_s")[measured]
    done_in_half = int(((completion_s > mid) & (completion_s <= last)).sum())
    # the backlog at mid; its chance movement over the half is about sqrt(2 x backlog)
    backlog_at_mid = arrived_by_mid - int((completion_s <= mid).sum())
    noise = math.sqrt(2 * max(backlog_at_mid, 1))
    completed = ~np.isnan(completion_s)
    run_end = float(completion_s[completed].max()) if completed.any() else last
    num_completed = int(completed.sum())
    del completion_s
    # how long a request stays when the queue is still short: the first quarter's median E2E
    e2e_s = column("e2e_s")[measured][early]
    e2e_s = e2e_s[~np.isnan(e2e_s)]
    stay_s = float(np.median(e2e_s)) if len(e2e_s) else None
    del e2e_s
    delay_s = column("queueing_delay_s")[measured][in_half]
    seen = ~np.isnan(delay_s)
    slope = None
    if seen.sum() >= MIN_ARRIVALS and span > 0:
        t, d = half_arrivals[seen], delay_s[seen]
        spread = float(((t - t.mean()) ** 2).sum())
        if spread > 0:
            slope = float(((t - t.mean()) * (d - d.mean())).sum() / spread)
    del delay_s, half_arrivals
    if arrivals and span > 0:
        out["offered_requests_per_s"] = arrivals / span
        out["served_requests_per_s"] = done_in_half / span
        out["served_share"] = done_in_half / arrivals
        out["backlog_growth"] = arrivals - done_in_half
    out["backlog_at_mid"] = backlog_at_mid
    out["queueing_delay_slope"] = slope
    out["queueing_delay_growth_s"] = None if slope is None else slope * span
    # the backlog says something only once a request's stay is short beside the half window
    share_judged = stay_s is not None and 2 * stay_s <= span and arrivals >= MIN_ARRIVALS
    out["served_share_judged"] = share_judged
    share, growth = out["served_share"], out["backlog_growth"]
    rise = 0.0 if slope is None else slope  # seconds of queueing delay per second
    delay_grows = rise * span >= MIN_DELAY_GROWTH_S
    if out["unfinished_share"] >= UNFINISHED_SHARE:
        out["verdict"] = "unstable"
        out["reason"] = (
            f"{out['unfinished_share']:.0%} of the requests were unfinished when the run "
            "stopped: the fleet did not keep up"
        )
    elif share_judged and share < UNSTABLE_SHARE and growth >= max(MIN_BACKLOG_GROWTH, 3 * noise):
        out["verdict"] = "unstable"
        out["reason"] = (
            f"served {share:.0%} of the second half's arrivals: the backlog (waiting and "
            f"running) grows by {growth:,} requests, so latencies grow with the run's length"
        )
    elif delay_grows and rise >= UNSTABLE_SLOPE:
        out["verdict"] = "unstable"
        out["reason"] = (
            f"queueing delay grows {rise:.2g} s per second of arrivals: the queue grows, "
            "so latencies grow with the run's length"
        )
    elif (share_judged and share < NEAR_SHARE and growth >= 2 * noise) or (
        delay_grows and rise >= NEAR_SLOPE
    ):
        out["verdict"] = "near_saturation"
        served = f"served {share:.0%} of the second half's arrivals, " if share_judged else ""
        out["reason"] = (
            f"{served}queueing delay growing {rise:.2g} s per second: close to capacity, "
            "latencies depend on the run's length"
        )
    elif arrivals < MIN_ARRIVALS:
        out["reason"] = f"{arrivals} arrivals in the second half: too few to judge a trend"
    else:
        out["reason"] = "no growing queue in the second half of the arrivals"
    if out["verdict"] != "stable" and run_end > first:
        # saturated: what it served on average from the first arrival to the last completion
        out["service_capacity_requests_per_s"] = num_completed / (run_end - first)
    if paced_by_client:
        out["reason"] += (
            "; the client waits for the fleet before sending (closed loop or a cap), so "
            "an overload queues in the client, not here"
        )
    return out
