"""The fleet under faults: replicas up, draining and down over a run, its fault events marked by
kind, and a table per kind; a plan's chosen run's ``faults`` block as a table.

``faults.parquet`` (``sim.output.faults``, a run with ``faults.*`` on) has one row per event:

| column | type | meaning |
|---|---|---|
| ``replica_id`` | int32 | the replica it took |
| ``kind`` | string | ``failure``, ``maintenance``, ``spot`` |
| ``start_s`` | float64 | when it began: the failure, the drain, the reclaim notice |
| ``down_s`` | float64 | when the replica went down (null: not within the run) |
| ``up_s`` | float64 | when it was back: repaired, drained and returned, replaced (null: never) |
| ``requests_retried`` | int32 | the requests it held, sent again |
| ``requests_failed`` | int32 | the requests it held, ended failed |

A replica is draining from an event's ``start_s`` to its ``down_s`` (a failure has none: it
goes at once), down from ``down_s`` to ``up_s``, and up otherwise (``states``). Two events of
one replica may share its time down: a failure during a drain ends the drain, and both rows
then hold the failure's ``down_s`` and ``up_s``; that time down is the later event's, the one
that took the replica (``lost_hours``). Times are the run's simulated seconds; the run's span
(``run_span``) is the summary's, from the first arrival to ``duration_s`` later (to the last
arrival at least), as the summary's availability is computed over.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from sim.output.summary_table import _num
from sim.report.document import Figure, Table
from sim.report.plotting import drawing, hours_or_seconds

SECONDS_PER_HOUR = 3600.0
# each kind's marker and colour, in the order of the table (a kind not listed: after them)
KINDS = {
    "failure": ("x", "C3"),
    "maintenance": ("v", "C1"),
    "spot": ("D", "C4"),
}
BACK = ("^", "C2")  # a replica back: repaired, returned from maintenance, replaced
STACKED = ("up", "draining")  # the figure's stacked states (down: the gap to the planned)


def run_span(arrivals: np.ndarray | None, summary: Mapping) -> tuple[float, float]:
    """The run's span in simulated seconds: from its first arrival, ``duration_s`` long, to its
    last arrival at least (as ``sim.deploy.faulty`` gives the summary's availability)."""
    start = float(np.min(arrivals)) if arrivals is not None and len(arrivals) else 0.0
    last = float(np.max(arrivals)) if arrivals is not None and len(arrivals) else 0.0
    return start, max(start + float(summary.get("duration_s") or 0.0), last)


def _ends(column: pd.Series) -> np.ndarray:
    """A time column, a null (not within the run) as never."""
    return column.astype(float).fillna(np.inf).to_numpy()


def states(faults: pd.DataFrame, num_replicas: int, start_s: float, end_s: float) -> pd.DataFrame:
    """The fleet as a step series over [start_s, end_s]: one row per change (and one at
    ``start_s``), with the replicas ``up``, ``draining`` and ``down`` from then until the next
    row, the last until ``end_s``."""
    start, down, up = (
        faults["start_s"].to_numpy(float),
        _ends(faults["down_s"]),
        _ends(faults["up_s"]),
    )
    replica = faults["replica_id"].to_numpy(int)
    times = np.concatenate([start, down, up])
    times = np.unique(np.concatenate([[start_s], times[(times > start_s) & (times < end_s)]]))
    rows = []
    for t in times:
        is_down = (down <= t) & (t < up)
        draining = (start <= t) & (t < down)
        down_ids = set(replica[is_down])
        draining_ids = set(replica[draining]) - down_ids
        rows.append(
            (t, num_replicas - len(down_ids) - len(draining_ids), len(draining_ids), len(down_ids))
        )
    return pd.DataFrame(rows, columns=["time_s", "up", "draining", "down"])


def lost_hours(faults: pd.DataFrame, start_s: float, end_s: float) -> np.ndarray:
    """Each event's replica-hours down within [start_s, end_s]: a time down two events share
    (a failure during a drain) is the later one's, and none of the earlier's."""
    down, up = _ends(faults["down_s"]), _ends(faults["up_s"])
    hours = np.clip(np.minimum(up, end_s) - np.maximum(down, start_s), 0.0, None)
    hours[~np.isfinite(down)] = 0.0
    key = pd.DataFrame(
        {"replica": faults["replica_id"].to_numpy(int), "down": down, "start": faults["start_s"]}
    )
    later = key.groupby(["replica", "down"])["start"].transform("max")
    hours[(key["start"] < later).to_numpy() & np.isfinite(down)] = 0.0
    return hours / SECONDS_PER_HOUR


def _kinds(faults: pd.DataFrame) -> list[str]:
    found = list(dict.fromkeys(faults["kind"].astype(str)))
    return [k for k in KINDS if k in found] + [k for k in found if k not in KINDS]


def kinds_table(faults: pd.DataFrame, start_s: float, end_s: float) -> Table:
    """Per kind: its events, the replica-hours it took down within the run, and the requests
    it had sent again and ended failed; then the whole run's."""
    lost = lost_hours(faults, start_s, end_s)
    rows = []
    for kind in _kinds(faults):
        mine = (faults["kind"] == kind).to_numpy()
        rows.append(
            [
                kind,
                str(int(mine.sum())),
                _num(float(lost[mine].sum())),
                str(int(faults["requests_retried"][mine].sum())),
                str(int(faults["requests_failed"][mine].sum())),
            ]
        )
    rows.append(
        [
            "all",
            str(len(faults)),
            _num(float(lost.sum())),
            str(int(faults["requests_retried"].sum())),
            str(int(faults["requests_failed"].sum())),
        ]
    )
    return Table(
        ["kind", "events", "replica-hours lost", "requests retried", "requests failed"],
        rows,
        "Fault events by kind (faults.parquet): replica-hours lost is the time down within "
        "the run's span (a draining replica still serves; a time down two events share is "
        "the later one's); retried and failed, the requests the replica held when it went.",
    )


def faults_figure(
    faults: pd.DataFrame, summary: Mapping, start_s: float, end_s: float, name: str = "faults"
) -> Figure | None:
    """Replicas up and draining (stacked) over the run, the planned fleet dashed, each fault's
    start marked by its kind and each return to service by ``BACK``; None without events."""
    if len(faults) == 0:
        return None
    planned = int(summary.get("num_replicas") or faults["replica_id"].max() + 1)
    fleet = states(faults, planned, start_s, end_s)
    scale, unit = hours_or_seconds(end_s - start_s)
    t = (np.append(fleet["time_s"].to_numpy(float), end_s) - start_s) / scale
    with drawing(1, 1, size=(9.0, 4.0)) as d:
        ax = d.axes[0][0]
        stacks = [np.append(fleet[s].to_numpy(float), float(fleet[s].iloc[-1])) for s in STACKED]
        ax.stackplot(t, *stacks, labels=list(STACKED), step="post", alpha=0.8)
        ax.axhline(planned, color="black", linestyle="--", linewidth=1, label="planned")
        marks_at = planned + 0.35
        for kind in _kinds(faults):
            marker, color = KINDS.get(kind, ("o", "C7"))
            at = faults["start_s"][faults["kind"] == kind].to_numpy(float)
            at = at[(at >= start_s) & (at <= end_s)]
            x = (at - start_s) / scale
            ax.scatter(x, np.full(len(at), marks_at), marker=marker, color=color, label=kind)
        back = faults["up_s"].dropna().to_numpy(float)
        back = back[(back >= start_s) & (back <= end_s)]
        if len(back):
            x = (back - start_s) / scale
            ax.scatter(
                x, np.full(len(back), marks_at + 0.25), marker=BACK[0], color=BACK[1], label="back"
            )
        ax.set_ylim(0, planned + 1)
        ax.set_ylabel("replicas")
        ax.set_xlabel(f"simulated time since the first arrival ({unit})")
        # below the axes: inside, it would hide the fleet at its lowest
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), fontsize=8, ncol=6)
    block = summary.get("faults") or {}
    availability = block.get("availability")
    least = int(fleet["up"].min())
    return Figure(
        name,
        f"Replicas up, draining (out of the router's reach, still serving what they hold) and "
        f"down over the run, of {planned} planned (dashed); marks: when each fault began, by "
        f"kind, and when a replica was back. {len(faults)} event(s), at least {least} "
        "replica(s) up throughout"
        + (f", availability {availability:.2%}" if isinstance(availability, float) else "")
        + ".",
        d.png,
    )


# the summary's faults block, as the rows of its table: (label, key, how to show it)
BLOCK_ROWS = (
    ("availability (replica-hours up / planned)", "availability", "share"),
    ("replica-hours planned", "replica_hours_planned", "number"),
    ("replica-hours down", "replica_hours_down", "number"),
    ("failures", "failures", "count"),
    ("maintenance drains", "maintenance", "count"),
    ("spot reclaims", "spot_reclaims", "count"),
    ("requests retried", "requests_retried", "count"),
    ("retries", "retries", "count"),
    ("seconds lost to retries", "retry_lost_s", "number"),
    ("requests failed", "failed", "count"),
    ("seconds degraded (a replica out)", "degraded_s", "number"),
    ("GPU MTBF (hours)", "gpu_mtbf_h", "number"),
    ("mean repair (hours)", "repair_h", "number"),
    ("spot reclaims per replica-hour", "spot_reclaims_per_h", "number"),
    ("on failure", "on_failure", "text"),
)


def _shown(value: object, how: str) -> str:
    if value is None:
        return "-"
    if how == "share" and isinstance(value, (int, float)):
        return f"{value:.3%}"
    if how in ("number", "count") and isinstance(value, (int, float)):
        return _num(float(value)) if how == "number" else f"{int(value):,}"
    return str(value)


def block_table(summary: Mapping, whose: str) -> Table | None:
    """The summary's ``faults`` block as a table (``whose``: which run it is); None without
    one."""
    block = summary.get("faults")
    if not isinstance(block, Mapping):
        return None
    rows = [[label, _shown(block.get(key), how)] for label, key, how in BLOCK_ROWS]
    degraded = block.get("degraded")
    if isinstance(degraded, Mapping):
        rows.append(["requests arrived while degraded", _shown(degraded.get("requests"), "count")])
        for name, label in (("ttft_s", "TTFT"), ("e2e_s", "E2E")):
            stats = degraded.get(name)
            if isinstance(stats, Mapping):
                rows.append([f"{label} p99 of those (s)", _shown(stats.get("p99"), "number")])
    by_reason = block.get("failed_by_reason")
    if isinstance(by_reason, Mapping) and by_reason:
        rows.append(
            ["failed, by cause", ", ".join(f"{k}: {v}" for k, v in sorted(by_reason.items()))]
        )
    return Table(
        ["faults", "value"],
        rows,
        f"The faults of the run{whose} (summary.json's faults block): over the run's span, a "
        "draining replica counts as up (it still serves what it holds).",
    )
