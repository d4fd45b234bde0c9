"""A fixed fleet: ``fleet.replicas`` replicas of the run's engine configuration, for the life
of the run (one model, or several placed by ``placement=colocated|dedicated``). The shape every
run has unless its config asks for another (``sim.deploy.shapes``). With ``fleet.tiers`` its
replicas are bought at price tiers, each billed at its tier's price (``sim.deploy.tiers``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.catalog.placement import build_placement
from sim.config.schema import RunConfig
from sim.deploy.engines import EngineSetup
from sim.deploy.shape import FleetShape, Priced, billed
from sim.deploy.tiers import tier_bill, tier_groups
from sim.engine.scheduler.base import Scheduler
from sim.fleet.admission import check_servable
from sim.fleet.replica import Engine
from sim.workload.source import Workload

TIERS_KEY = "fleet.tiers"


class FixedFleet(FleetShape):
    """``fleet.replicas`` replicas placed by ``placement``, each GPU at the run's price, or at
    its replica's tier's (``fleet.tiers``)."""

    def __init__(self, cfg: dict[str, Any], run: RunConfig) -> None:
        super().__init__(cfg, run)
        placement = build_placement(run, run.placement, run.fleet.replicas)
        self.engines = EngineSetup(cfg, run, placement)
        self.placement = self.engines.placement  # (a speculative drafter's memory out of the KV)
        first = self.placement.deployments[0]
        # (built now: a mix that does not add up, or a tier without a price, is refused here)
        self.tier_groups = (
            None
            if run.fleet.tiers is None
            else tier_groups(
                run.cost, run.fleet.tiers, run.fleet.replicas, first.num_gpus, first.gpu, TIERS_KEY
            )
        )

    @classmethod
    def applies(cls, run: RunConfig) -> bool:
        return True

    def check_servable(
        self, workload: Workload, model_ids: np.ndarray, length_field: tuple[str, Any]
    ) -> list[Scheduler]:
        # one scheduler per model: it checks its options too
        schedulers = [self.engines.scheduler(m) for m in range(len(self.placement.deployments))]
        check_servable(workload, model_ids, schedulers, length_field)
        return schedulers

    def replica_engines(self) -> list[list[Engine]]:
        engine = self.engines.engine
        return [[engine(m) for m in models] for models in self.placement.replica_models]

    def priced(self) -> Priced:
        deployments = self.placement.deployments
        groups = self.tier_groups
        return Priced(
            num_gpus=self.run.fleet.replicas * deployments[0].num_gpus,
            num_replicas=self.run.fleet.replicas,
            kv_capacity_tokens=[d.memory.kv_capacity_tokens for d in deployments],
            gpu=deployments[0].gpu,
            billed=None if groups is None else billed(groups),
            per_tier=None if groups is None else tier_bill(groups),
            tiers_source=None if groups is None else TIERS_KEY,
        )
