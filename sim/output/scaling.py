"""The fleet's size over a run whose replica count changes (``autoscale``), and what it cost.

The autoscaler (``sim.fleet.autoscaler``) records a row at every change: replicas serving,
being provisioned (asked for, loading weights: billed, not serving) and draining (taking no
new requests, finishing their own: billed), the GPUs billed and the $/hour they cost from that
moment on, and which replica changed (with faults, one lost: ``failed``, out of the bill at
once). ``scaling.parquet`` holds the rows as they are; the
summary's ``autoscale`` block integrates them over the run's span, so the bill is GPUs x
time, not replicas x hours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pyarrow as pa

SCALING_SCHEMA = pa.schema(
    [
        ("time_s", pa.float64()),
        ("replicas_ready", pa.int32()),
        ("replicas_provisioning", pa.int32()),
        ("replicas_draining", pa.int32()),
        ("gpus_billed", pa.int32()),
        ("usd_per_hour", pa.float64()),
        # start | scale_up | ready | drain | released | cancelled | failed (lost to a fault:
        # sim.fleet.faults; its replacement is a scale_up)
        ("event", pa.string()),
        # the replica that became ready, began to drain, was released or lost (null otherwise)
        ("replica_id", pa.int32()),
    ]
)
_SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class ScalingTotals:
    """The integrals of a ``ScalingLog`` over one span of the run."""

    span_s: float
    gpu_hours: float
    usd_total: float
    replica_seconds: float  # serving and draining: what ran steps
    replicas_mean: float  # billed replicas (provisioning included), time-weighted
    replicas_min: int
    replicas_max: int
    gpus_max: int
    scale_ups: int
    scale_downs: int

    def summary(self, policy: str, provision_s: float) -> dict[str, float | int | str]:
        return {
            "policy": policy,
            "provision_s": provision_s,
            "gpu_hours": self.gpu_hours,
            "usd_total": self.usd_total,
            "replicas_mean": self.replicas_mean,
            "replicas_min": self.replicas_min,
            "replicas_max": self.replicas_max,
            "scale_ups": self.scale_ups,
            "scale_downs": self.scale_downs,
        }


class ScalingLog:
    """The rows, appended by the autoscaler as the fleet changes."""

    def __init__(self) -> None:
        self.rows: list[tuple[float, int, int, int, int, float, str, int | None]] = []

    def record(
        self,
        time_s: float,
        event: str,
        *,
        ready: int,
        provisioning: int,
        draining: int,
        gpus: int,
        usd_per_hour: float,
        replica_id: int | None = None,
    ) -> None:
        self.rows.append(
            (time_s, ready, provisioning, draining, gpus, usd_per_hour, event, replica_id)
        )

    def table(self) -> pa.Table:
        columns = list(zip(*self.rows, strict=True)) if self.rows else [()] * len(SCALING_SCHEMA)
        return pa.table(
            [pa.array(c, type=f.type) for c, f in zip(columns, SCALING_SCHEMA, strict=True)],
            schema=SCALING_SCHEMA,
        )

    def totals(self, start_s: float, end_s: float) -> ScalingTotals:
        """The integrals over ``[start_s, end_s]``: each row's state holds until the next
        row's time (the last until ``end_s``)."""
        assert self.rows, "the autoscaler records the fleet at time 0"
        gpu_s = usd_s = replica_s = billed_s = 0.0
        counts = []
        gpus_max = 0
        for i, (time_s, ready, provisioning, draining, gpus, usd_per_hour, *_) in enumerate(
            self.rows
        ):
            until = self.rows[i + 1][0] if i + 1 < len(self.rows) else math.inf
            lasts = max(0.0, min(until, end_s) - max(time_s, start_s))
            if time_s <= end_s and until >= start_s:
                counts.append(ready + provisioning + draining)
                gpus_max = max(gpus_max, gpus)
            gpu_s += gpus * lasts
            usd_s += usd_per_hour * lasts
            replica_s += (ready + draining) * lasts
            billed_s += (ready + provisioning + draining) * lasts
        span_s = max(end_s - start_s, 0.0)
        events = [row[6] for row in self.rows]
        return ScalingTotals(
            span_s=span_s,
            gpu_hours=gpu_s / _SECONDS_PER_HOUR,
            usd_total=usd_s / _SECONDS_PER_HOUR,
            replica_seconds=replica_s,
            replicas_mean=billed_s / span_s if span_s > 0 else float(counts[0]),
            replicas_min=min(counts),
            replicas_max=max(counts),
            gpus_max=gpus_max,
            scale_ups=events.count("scale_up"),
            scale_downs=events.count("drain") + events.count("cancelled"),
        )
