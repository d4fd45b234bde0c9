"""A fleet's shape: the one interface through which the composition root (``sim.run``) builds,
runs and sums up a fleet, whatever its shape (``sim.deploy.shapes`` lists them).

A shape is built from the checked config (``FleetShape(cfg, run)``: every refusal of what it
does not model comes here, before anything runs), then asked, in this order:

1. what it places: ``placement`` (deployments, the models' mix, each replica's models) and
   ``engines``, the run's own engine configuration (``sim.deploy.engines``);
2. ``check_servable``: the requests it can never serve refused, by the schedulers that decide;
3. ``replica_engines``: the engines of each replica at time 0;
4. how it admits and routes: ``cluster_options`` (the replicas the router feeds, whether decode
   stretches may fast-forward), ``replica_pools`` (each replica's pool in the step log);
5. ``connect``: what it adds to the running cluster (an autoscaler, transfers between pools);
6. ``priced``: what the summary bills (GPUs, replicas, KV capacity, $/hour), from each group of
   like replicas at its own price (``ReplicaGroup``);
7. ``add_to_summary`` and ``tables``: its blocks of ``summary.json`` and its own files.

With faults on (``sim.deploy.faulty``), after ``connect``: ``fault_parts``, how its replicas
take faults (their GPUs, their fresh engines when one comes back, and the parts of the fleet
that follow a loss: an autoscaler, transfers between pools).

Every step has the plain fleet's answer here but ``check_servable``, ``replica_engines`` and
``priced``, which each shape says.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from sim.catalog.hardware import GPU
from sim.catalog.placement import Placement
from sim.config.autoscale import AutoscaleConfig
from sim.config.schema import RunConfig
from sim.deploy.engines import EngineSetup
from sim.engine.scheduler.base import Scheduler
from sim.fleet.autoscaler import Autoscaler
from sim.fleet.cluster import Cluster
from sim.fleet.disaggregation import Disaggregation
from sim.fleet.replica import Engine
from sim.output.results import requests_schema
from sim.output.scaling import ScalingLog
from sim.output.step_log import StepLog
from sim.workload.source import Workload


@dataclass(frozen=True)
class ReplicaGroup:
    """Replicas billed alike: how many, their GPUs each, and each GPU's $/hour; ``tier``: the
    price tier they are bought at (``sim.deploy.tiers``), None for the run's one price."""

    replicas: int
    gpus_per_replica: int
    usd_per_gpu_hour: float
    tier: str | None = None

    @property
    def gpus(self) -> int:
        return self.replicas * self.gpus_per_replica

    @property
    def usd_per_hour(self) -> float:
        return self.gpus * self.usd_per_gpu_hour


def billed(groups: Sequence[ReplicaGroup]) -> tuple[float, float]:
    """The GPUs and $/hour of a fleet of ``groups``, each GPU at its own price (the summary's
    ``billed``: ``sim.output.cost.fleet_cost``)."""
    return float(sum(g.gpus for g in groups)), sum(g.usd_per_hour for g in groups)


@dataclass(frozen=True)
class Priced:
    """What the summary prices a fleet by (``sim.output.results.summarize``'s arguments):
    its GPUs and replicas, each model's KV capacity per replica, the GPU named in the cost
    block; ``billed``: GPUs and $/hour when they are not ``num_gpus`` at ``gpu``'s price (None:
    they are); ``scaling``: a fleet whose size changed, billed from its log; ``per_tier``: a
    fleet bought at price tiers, the cost block's ``per_tier`` (``sim.deploy.tiers``), and
    ``tiers_source`` the config field of its mix (None: the run's one price)."""

    num_gpus: int
    num_replicas: int
    kv_capacity_tokens: list[int]
    gpu: GPU
    billed: tuple[float, float] | None = None
    scaling: tuple[ScalingLog, AutoscaleConfig] | None = None
    per_tier: dict[str, dict[str, float | int]] | None = None
    tiers_source: str | None = None


@dataclass(frozen=True)
class FaultParts:
    """How a fleet's replicas take faults (``sim.fleet.faults.FleetFaults``'s arguments):
    ``gpus[i]``, replica ``i``'s GPUs at time 0 (its failure rate's multiple);
    ``new_engines(i)``, fresh engines for replica ``i`` when it comes back; the fleet's
    ``autoscaler`` (it replaces lost replicas and adds its own) or ``transfers`` between
    pools, and each replica's pool (``pools``), where the shape has them."""

    gpus: list[int]
    new_engines: Callable[[int], list[Engine]]
    autoscaler: Autoscaler | None = None
    transfers: Disaggregation | None = None
    pools: list[str] | None = None


class FleetShape(ABC):
    """One shape of fleet (module docstring). ``applies`` says whether a checked config asks
    for it; the registry (``sim.deploy.shapes``) asks the shapes in turn."""

    # the requests table has the KV transfer columns (``sim.output.results.requests_schema``)
    moves_kv: ClassVar[bool] = False
    placement: Placement
    engines: EngineSetup

    def __init__(self, cfg: dict[str, Any], run: RunConfig) -> None:
        self.cfg, self.run = cfg, run

    @classmethod
    @abstractmethod
    def applies(cls, run: RunConfig) -> bool:
        """Whether ``run`` (checked) asks for this shape."""

    @abstractmethod
    def check_servable(
        self, workload: Workload, model_ids: np.ndarray, length_field: tuple[str, Any]
    ) -> list[Scheduler]:
        """Refuse a workload the fleet can never serve all of
        (``sim.fleet.admission.check_servable``); the schedulers asked, whose refusal texts
        explain the summary's rejection reasons. Each engine is built in one fixed order (a
        speculating engine's draws are numbered as built)."""

    @abstractmethod
    def replica_engines(self) -> list[list[Engine]]:
        """Each replica's engines at time 0 (after ``check_servable``)."""

    @abstractmethod
    def priced(self) -> Priced:
        """What the summary bills (after the run: a scaled fleet's log is then complete)."""

    def requests_columns(self, sessions: bool) -> pa.Schema:
        """The requests table's columns for this fleet."""
        return requests_schema(
            self.run.kv.prefix_caching,
            sessions,
            self.engines.host_tiers is not None,
            disaggregated=self.moves_kv,
        )

    def step_log_blocks(self) -> list[int]:
        """Each model's KV blocks per replica, the step log's KV use denominator."""
        return [d.memory.num_blocks for d in self.placement.deployments]

    def replica_pools(self) -> list[str] | None:
        """Each replica's pool by replica id (the step log's ``pool``); None: one pool."""
        return None

    def cluster_options(self) -> dict[str, Any]:
        """``sim.fleet.cluster.Cluster``'s options this fleet sets (the replicas the router
        feeds, whether decode stretches may fast-forward)."""
        return {"fast_forward_decode": self.run.sim.fast_forward_decode}

    def connect(self, cluster: Cluster, seed: int) -> None:
        """Attach what drives the fleet besides its router to ``cluster`` before it runs."""
        return None  # (a fixed fleet: nothing but its router)

    def fault_parts(self) -> FaultParts:
        """How this fleet's replicas take faults (after ``connect``): the placed fleet's, each
        replica's GPUs (its largest model's) and engines as at time 0."""
        placement, engine = self.placement, self.engines.engine
        return FaultParts(
            gpus=[
                max(placement.deployments[m].num_gpus for m in models)
                for models in placement.replica_models
            ],
            new_engines=lambda i: [engine(m) for m in placement.replica_models[i]],
        )

    def add_to_summary(
        self,
        summary: dict[str, Any],
        step_log: StepLog,
        column: Callable[[str], np.ndarray],
    ) -> None:
        """Add this fleet's blocks to ``summary`` (after ``summarize``), from the step log's
        totals and the requests table's columns (``column(name)``)."""
        return None  # (a fixed fleet: the summary's own figures say it all)

    def tables(self) -> dict[str, pa.Table]:
        """This fleet's own files of the run folder (name: table), after the run."""
        return {}
