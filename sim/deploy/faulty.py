"""A fleet whose replicas go (``faults.*`` set): failures, maintenance drains, spot reclaims.

Not one more shape but a wrapper around the shape the registry picked (``sim.deploy.shapes``,
``WRAPPERS``): every member passes through to it, and this adds its part:

- ``cluster_options``: replicas step one by one (a replica going down mid decode stretch would
  leave the stretch's ended steps unapplied);
- ``connect``: the inner shape's, then the faults' processes (``sim.fleet.faults``), which
  take replicas down and bring them back through the cluster's own methods, and through
  what the inner shape adds (``FleetShape.fault_parts``: an autoscaler replaces a lost
  replica, a disaggregated fleet's transfers are called off with it); random reclaims take
  the replicas bought spot (``sim.deploy.tiers.spot_replicas``);
- ``requests_columns``: ``retries``, ``retry_lost_s``, ``fail_reason``;
- ``priced``: the inner shape's bill, whole: a replica that is down is still paid for, as
  reserved and on-demand capacity is (a spot replica's bill after its loss too: the
  replacement is assumed bought at once, even when ``replace_s`` is null);
- ``add_to_summary``: the ``faults`` block (with ``by_pool`` for a disaggregated fleet), and
  top-level ``failed`` and ``failed_by_reason``;
- ``tables``: ``faults.parquet``.

What it does not model yet, refused with the key that asks: a frontend (tokens streamed
after their step: a lost replica's stream would need unwinding), a prefix cache and
speculative decoding (their counters are per engine, and a replica comes back with fresh
engines). On an autoscaled fleet a lost replica is replaced by the autoscaler, after its
provisioning delay: a repair or replacement time of the faults' own (``schedule[].repair_s``,
``spot[].replace_s``) is refused there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from sim.config.faults import Maintenance, ScheduledFailure, SpotReclaim
from sim.config.schema import RunConfig
from sim.deploy.shape import FleetShape, Priced
from sim.deploy.tiers import spot_replicas
from sim.engine.scheduler.base import Scheduler
from sim.errors import ConfigError, require
from sim.fleet.cluster import Cluster
from sim.fleet.faults import FleetFaults
from sim.fleet.replica import Engine
from sim.output.faults import FaultLog
from sim.output.results import FAULT_COLUMNS
from sim.output.run_files import FAULTS_FILE
from sim.output.step_log import StepLog
from sim.workload.source import Workload

# what faults are not modelled with yet: (the key, whether the run sets it, why)
_NOT_WITH = (
    ("frontend.token_s", lambda run: run.frontend.token_s > 0, "a frontend"),
    ("kv.prefix_caching", lambda run: run.kv.prefix_caching, "a prefix cache"),
    ("spec_decode.num_draft_tokens", lambda run: run.spec_decode.enabled, "speculative decoding"),
)


class FaultyFleet(FleetShape):
    """``inner``, a fleet the registry picked, whose replicas fail, drain and are reclaimed as
    ``faults`` says."""

    def __init__(self, inner: FleetShape) -> None:
        run = inner.run
        super().__init__(inner.cfg, run)
        for key, sets, what in _NOT_WITH:
            if sets(run):
                raise ConfigError(
                    key,
                    _value(inner.cfg, key),
                    f"faults are not modelled with {what} yet: turn one of them off",
                )
        faults = run.faults
        pools = inner.replica_pools()
        replicas = run.fleet.replicas if pools is None else len(pools)
        groups: tuple[tuple[str, Sequence[ScheduledFailure | Maintenance | SpotReclaim]], ...] = (
            ("schedule", faults.schedule),
            ("maintenance", faults.maintenance),
            ("spot", faults.spot),
        )
        autoscaled = run.autoscale.enabled
        for group, entries in groups:
            for i, entry in enumerate(entries):
                # (an autoscaled fleet's ids grow as it adds replicas: an event naming one not
                # in the fleet at its time is none, sim.fleet.faults)
                require(
                    autoscaled or entry.replica < replicas,
                    f"faults.{group}[{i}].replica",
                    entry.replica,
                    f"is not a replica of this fleet (ids 0 to {replicas - 1})",
                )
        if autoscaled:
            _refuse_own_replacements(faults.schedule, faults.spot)
            require(
                faults.spot_replace_s is None,
                "faults.spot_replace_s",
                faults.spot_replace_s,
                "the autoscaler replaces a reclaimed replica after autoscale.provision_s: leave "
                "it out",
            )
        # the replicas random reclaims take (none asked: none, and no tier looked at)
        self.spot = spot_replicas(run) if faults.random_reclaims else []
        require(
            bool(self.spot) or not faults.random_reclaims,
            "faults.spot_reclaims_per_h",
            faults.spot_reclaims_per_h,
            "reclaims spot replicas, and this fleet has none: buy some spot (fleet.tiers="
            "{spot: 1, on_demand: rest}, a pool's tiers, or cost.tier=spot)",
        )
        self.inner = inner
        self.placement = inner.placement
        self.engines = inner.engines
        self.log = FaultLog()

    @classmethod
    def applies(cls, run: RunConfig) -> bool:
        return run.faults.enabled

    def check_servable(
        self, workload: Workload, model_ids: np.ndarray, length_field: tuple[str, Any]
    ) -> list[Scheduler]:
        return self.inner.check_servable(workload, model_ids, length_field)

    def replica_engines(self) -> list[list[Engine]]:
        return self.inner.replica_engines()

    def requests_columns(self, sessions: bool) -> pa.Schema:
        schema = self.inner.requests_columns(sessions)
        for name, kind in FAULT_COLUMNS:
            schema = schema.append(pa.field(name, kind))
        return schema

    def step_log_blocks(self) -> list[int]:
        return self.inner.step_log_blocks()

    def replica_pools(self) -> list[str] | None:
        return self.inner.replica_pools()

    def cluster_options(self) -> dict[str, Any]:
        return {**self.inner.cluster_options(), "fast_forward_decode": False}

    def connect(self, cluster: Cluster, seed: int) -> None:
        self.inner.connect(cluster, seed)
        parts = self.inner.fault_parts()
        FleetFaults(
            cluster,
            self.run.faults,
            parts.gpus,
            seed,
            parts.new_engines,
            self.log,
            autoscaler=parts.autoscaler,
            transfers=parts.transfers,
            pools=parts.pools,
            # an autoscaled fleet is bought spot whole (cost.tier=spot: a mix is refused
            # there), and its replicas at time 0 are its first count's, not fleet.replicas
            spot=range(len(parts.gpus)) if self.spot and parts.autoscaler else self.spot,
        )

    def priced(self) -> Priced:
        return self.inner.priced()  # (down replicas billed: module docstring)

    def add_to_summary(
        self, summary: dict[str, Any], step_log: StepLog, column: Callable[[str], np.ndarray]
    ) -> None:
        self.inner.add_to_summary(summary, step_log, column)
        # the run's span, to its last arrival at least (requests that failed at once, with
        # no replica up, end no step)
        arrival = column("arrival_time_s")
        start_s = float(arrival.min()) if len(arrival) else 0.0
        end_s = max(start_s + summary["duration_s"], float(arrival.max()) if len(arrival) else 0.0)
        block = self.log.summary(self.run.faults, column, start_s, end_s)
        summary["failed"] = block["failed"]
        summary["failed_by_reason"] = block["failed_by_reason"]
        summary["faults"] = block

    def tables(self) -> dict[str, pa.Table]:
        return {**self.inner.tables(), FAULTS_FILE: self.log.table()}


def _refuse_own_replacements(
    schedule: Sequence[ScheduledFailure], spot: Sequence[SpotReclaim]
) -> None:
    """On an autoscaled fleet the autoscaler replaces a lost replica: a repair or replacement
    time of the faults' own would bring back a replica it has replaced already."""
    for i, failure in enumerate(schedule):
        require(
            failure.repair_s is None,
            f"faults.schedule[{i}].repair_s",
            failure.repair_s,
            "the autoscaler replaces a failed replica after autoscale.provision_s: leave it out",
        )
    for i, reclaim in enumerate(spot):
        require(
            reclaim.replace_s is None,
            f"faults.spot[{i}].replace_s",
            reclaim.replace_s,
            "the autoscaler replaces a reclaimed replica after autoscale.provision_s: leave it out",
        )


def _value(cfg: dict[str, Any], key: str) -> object:
    """The value at dotted ``key`` of a plain config (``placement``: its mode)."""
    node: Any = cfg
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        return node.get("mode", "{...}")
    return node
