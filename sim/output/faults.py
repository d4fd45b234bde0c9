"""What faults did to a run: ``faults.parquet`` and the summary's ``faults`` block.

The ``FaultLog`` hears every change of a replica's state (``sim.fleet.faults``): an event
begins (a failure, a maintenance drain, a spot reclaim notice), the replica leaves the router
(out of routing), goes down, comes back up. From it:

- ``faults.parquet``, one row per event (``FAULTS_SCHEMA``): the replica, the kind, when it
  began, when the replica went down and came back up (null: not within the run), and the
  requests sent again and failed when it went;
- availability: replica-hours up over replica-hours planned, over the run's span (a draining
  replica is up: it still serves what it holds; a down one is billed all the same, as
  reserved and on-demand capacity is). A replica is planned from its start (time 0, or when
  an autoscaler made it ready) until it is released, or, lost on an autoscaled fleet, until
  its replacement is ready (or called off): the wait for the replacement counts as down;
- per pool (a disaggregated fleet, ``by_pool``): the same availability, and the events, over
  each pool's replicas;
- degraded periods: the times at least one replica was out of the router's reach (draining or
  down), and the latency of the requests that arrived then, beside the whole run's;
- the requests sent again and failed, by cause, from the requests table's columns
  (``retries``, ``retry_lost_s``, ``fail_reason``: ``sim.output.results.FAULT_COLUMNS``, in
  the table only when faults are on).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from sim.config.faults import FaultsConfig
from sim.engine.request import COMPLETED, FAILED
from sim.output.results import distribution

FAILURE, MAINTENANCE, SPOT = "failure", "maintenance", "spot"
FAULTS_SCHEMA = pa.schema(
    [
        ("replica_id", pa.int32()),
        ("kind", pa.string()),
        ("start_s", pa.float64()),
        ("down_s", pa.float64()),
        ("up_s", pa.float64()),
        ("requests_retried", pa.int32()),
        ("requests_failed", pa.int32()),
    ]
)
HOUR_S = 3600.0
LATENCIES = ("ttft_s", "tpot_s", "e2e_s")  # those of the summary's ``faults.degraded``


@dataclass(eq=False)
class FaultEvent:
    """One row of ``faults.parquet``."""

    replica_id: int
    kind: str
    start_s: float
    down_s: float | None = None
    up_s: float | None = None
    retried: int = 0
    failed: int = 0


@dataclass(slots=True)
class Span:
    """A replica's time down, or out of routing: from ``start_s`` to ``end_s`` (None: to the
    end of the run)."""

    start_s: float
    end_s: float | None = None

    def within(self, start_s: float, end_s: float) -> tuple[float, float]:
        """The part of it within [start_s, end_s] (empty: end <= start)."""
        return max(self.start_s, start_s), min(end_s if self.end_s is None else self.end_s, end_s)


class FaultLog:
    def __init__(self) -> None:
        self.events: list[FaultEvent] = []
        self.num_replicas = 0
        # per replica: the spans it was down, and those it was out of routing
        self.down_intervals: list[list[Span]] = []
        self.out_intervals: list[list[Span]] = []
        self._open: list[list[FaultEvent]] = []
        # per replica: when it was planned (``Span``: from its start to its end, if any)
        self.lifetimes: list[Span] = []
        self.pools: list[str] | None = None  # each replica's pool (a disaggregated fleet)

    def start(self, num_replicas: int, pools: list[str] | None = None) -> None:
        """A fleet of ``num_replicas``, all up (``pools``: each one's pool, if several)."""
        self.num_replicas = 0
        self.pools = pools
        self.down_intervals, self.out_intervals, self._open, self.lifetimes = [], [], [], []
        for _ in range(num_replicas):
            self.add_replica(0.0)

    def add_replica(self, now: float) -> None:
        """One more replica (the next id), up and planned from ``now``."""
        self.num_replicas += 1
        self.down_intervals.append([])
        self.out_intervals.append([])
        self._open.append([])
        self.lifetimes.append(Span(now))

    def gone(self, replica_id: int, now: float) -> None:
        """Replica ``replica_id`` is planned no more from ``now`` (released, or replaced); a
        down span of its own ends there."""
        self.lifetimes[replica_id].end_s = now
        for spans in (self.down_intervals[replica_id], self.out_intervals[replica_id]):
            if spans and spans[-1].end_s is None:
                spans[-1].end_s = now

    def begin(self, replica_id: int, kind: str, now: float) -> FaultEvent:
        event = FaultEvent(replica_id, kind, now)
        self.events.append(event)
        self._open[replica_id].append(event)
        return event

    def out_of_routing(self, replica_id: int, now: float) -> None:
        self.out_intervals[replica_id].append(Span(now))

    def down(self, replica_id: int, now: float) -> None:
        self.down_intervals[replica_id].append(Span(now))
        for event in self._open[replica_id]:
            if event.down_s is None:
                event.down_s = now

    def up(self, replica_id: int, now: float) -> None:
        self.down_intervals[replica_id][-1].end_s = now
        self.out_intervals[replica_id][-1].end_s = now
        self.closed(replica_id, now)

    def closed(self, replica_id: int, up_s: float | None) -> None:
        """The events open on ``replica_id`` are over: it is back (or replaced) at ``up_s``
        (None: never, within the run)."""
        for event in self._open[replica_id]:
            event.up_s = up_s
        self._open[replica_id] = []

    # -- what the run's files say ----------------------------------------------------------

    def table(self) -> pa.Table:
        events = self.events
        return pa.table(
            {
                "replica_id": pa.array([e.replica_id for e in events], pa.int32()),
                "kind": pa.array([e.kind for e in events], pa.string()),
                "start_s": pa.array([e.start_s for e in events], pa.float64()),
                "down_s": pa.array([e.down_s for e in events], pa.float64()),
                "up_s": pa.array([e.up_s for e in events], pa.float64()),
                "requests_retried": pa.array([e.retried for e in events], pa.int32()),
                "requests_failed": pa.array([e.failed for e in events], pa.int32()),
            },
            schema=FAULTS_SCHEMA,
        )

    def _ids(self, pool: str | None) -> range | list[int]:
        """The replicas of ``pool`` (None: all of them)."""
        if pool is None or self.pools is None:
            return range(self.num_replicas)
        return [i for i, p in enumerate(self.pools) if p == pool]

    def down_s(self, start_s: float, end_s: float, pool: str | None = None) -> float:
        """Replica-seconds down within [start_s, end_s] (of ``pool``'s replicas)."""
        return sum(
            max(0.0, hi - lo)
            for i in self._ids(pool)
            for lo, hi in (span.within(start_s, end_s) for span in self.down_intervals[i])
        )

    def planned_s(self, start_s: float, end_s: float, pool: str | None = None) -> float:
        """Replica-seconds planned within [start_s, end_s] (of ``pool``'s replicas)."""
        return sum(
            max(0.0, hi - lo)
            for lo, hi in (self.lifetimes[i].within(start_s, end_s) for i in self._ids(pool))
        )

    def availability(self, start_s: float, end_s: float, pool: str | None = None) -> float | None:
        """Replica-seconds up over replica-seconds planned within [start_s, end_s]."""
        planned = self.planned_s(start_s, end_s, pool)
        return 1.0 - self.down_s(start_s, end_s, pool) / planned if planned > 0 else None

    def degraded(self, start_s: float, end_s: float) -> list[tuple[float, float]]:
        """The periods within [start_s, end_s] when some replica was out of routing, merged."""
        out = sorted(span.within(start_s, end_s) for spans in self.out_intervals for span in spans)
        merged: list[tuple[float, float]] = []
        for lo, hi in out:
            if hi <= lo:
                continue
            if merged and lo <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
            else:
                merged.append((lo, hi))
        return merged

    def up_count_seconds(self, start_s: float, end_s: float) -> np.ndarray:
        """``out[k]``: seconds within [start_s, end_s] with exactly k replicas up (not down), of
        a fleet whose replicas are all planned the whole time (a fixed fleet's)."""
        changes: list[tuple[float, int]] = []
        for spans in self.down_intervals:
            for lo, hi in (span.within(start_s, end_s) for span in spans):
                if hi > lo:
                    changes += [(lo, -1), (hi, +1)]
        changes.sort()
        out = np.zeros(self.num_replicas + 1)
        up, last = self.num_replicas, start_s
        for time_s, delta in changes:
            out[up] += time_s - last
            up, last = up + delta, time_s
        out[up] += end_s - last
        return out

    def summary(
        self,
        config: FaultsConfig,
        column: Callable[[str], np.ndarray],
        start_s: float,
        end_s: float,
    ) -> dict[str, Any]:
        """The summary's ``faults`` block over the run's span [start_s, end_s]."""
        planned_h = self.planned_s(start_s, end_s) / HOUR_S
        kinds = [e.kind for e in self.events if e.start_s <= end_s]
        retries = column("retries")
        status = column("status")
        failed = status == FAILED
        reasons = column("fail_reason")[failed].astype(str)
        by_reason = dict(zip(*np.unique(reasons, return_counts=True), strict=True))
        degraded = self.degraded(start_s, end_s)
        arrival = column("arrival_time_s")
        during = np.zeros(len(arrival), dtype=bool)
        for a, b in degraded:
            during |= (arrival >= a) & (arrival < b)
        completed_during = during & (status == COMPLETED)
        latency = {name: distribution(column(name)[completed_during]) for name in LATENCIES}
        block: dict[str, Any] = {
            "on_failure": config.on_failure,
            "gpu_mtbf_h": config.gpu_mtbf_h,
            "repair": config.repair,
            "repair_h": config.repair_h,
            "spot_reclaims_per_h": config.spot_reclaims_per_h,
            "availability": self.availability(start_s, end_s),
            "replica_hours_planned": planned_h,
            "replica_hours_down": self.down_s(start_s, end_s) / HOUR_S,
            "failures": kinds.count(FAILURE),
            "maintenance": kinds.count(MAINTENANCE),
            "spot_reclaims": kinds.count(SPOT),
            "requests_retried": int((retries > 0).sum()),
            "retries": int(retries.sum()),
            "retry_lost_s": float(column("retry_lost_s").sum()),
            "failed": int(failed.sum()),
            "failed_by_reason": {str(k): int(v) for k, v in by_reason.items()},
            "degraded_s": sum(b - a for a, b in degraded),
            "degraded": {
                "requests": int(during.sum()),
                "completed": int(completed_during.sum()),
                **latency,
            },
        }
        if self.pools is not None:
            block["by_pool"] = {
                pool: self._pool_block(pool, start_s, end_s) for pool in dict.fromkeys(self.pools)
            }
        return block

    def _pool_block(self, pool: str, start_s: float, end_s: float) -> dict[str, Any]:
        """``by_pool.<pool>``: its replicas' availability and events, and the requests its
        losses sent again and failed (as ``faults.parquet`` counts them)."""
        assert self.pools is not None
        events = [e for e in self.events if e.start_s <= end_s and self.pools[e.replica_id] == pool]
        kinds = [e.kind for e in events]
        return {
            "replicas": len(self._ids(pool)),
            "availability": self.availability(start_s, end_s, pool),
            "replica_hours_down": self.down_s(start_s, end_s, pool) / HOUR_S,
            "failures": kinds.count(FAILURE),
            "maintenance": kinds.count(MAINTENANCE),
            "spot_reclaims": kinds.count(SPOT),
            "requests_retried": sum(e.retried for e in events),
            "requests_failed": sum(e.failed for e in events),
        }
