"""An autoscaled fleet (``autoscale.policy`` set): replicas of one model added and drained as
the run goes by ``sim.fleet.autoscaler``, each of one of its engine configurations (the run's
own, ``base``, and those of ``autoscale.engines``), billed for the GPUs it held over the span.

Adds the summary's ``autoscale.engines`` block (what each engine configuration was; the rest of
``autoscale`` is the scaling log's, ``sim.output.scaling``) and ``scaling.parquet``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from sim.catalog.placement import build_placement
from sim.config.autoscale import BASE_ENGINE
from sim.config.compose import with_settings
from sim.config.schema import RunConfig, validate_run
from sim.deploy.engines import EngineSetup
from sim.deploy.fixed import FixedFleet
from sim.deploy.shape import FaultParts, Priced
from sim.engine.scheduler.base import Scheduler
from sim.errors import ConfigError, require
from sim.fleet.admission import check_servable
from sim.fleet.autoscaler import Autoscaler, Variant
from sim.fleet.cluster import Cluster
from sim.fleet.replica import Engine
from sim.output.run_files import SCALING_FILE
from sim.output.scaling import ScalingLog
from sim.output.step_log import StepLog
from sim.workload.source import Workload


class AutoscaledFleet(FixedFleet):
    """The fixed fleet's engine configuration and its variants, scaled by an autoscaler."""

    def __init__(self, cfg: dict[str, Any], run: RunConfig) -> None:
        auto = run.autoscale
        require(
            run.fleet.tiers is None,
            "fleet.tiers",
            run.fleet.tiers,
            "price tiers are not modelled for an autoscaled fleet, whose replicas come and go: "
            "price it with cost.tier, or plan tier mixes on a fixed fleet",
        )
        super().__init__(cfg, run)
        require(
            self.placement.mode == "single",
            "autoscale.policy",
            auto.policy,
            "scales a fleet of one model: use placement=single",
        )
        self.variants: dict[str, Variant] = {BASE_ENGINE: self.engines.variant(BASE_ENGINE)}
        for name, settings in auto.engines.items():
            variant_cfg = with_settings(cfg, settings, f"autoscale.engines.{name}")
            variant_run = validate_run(variant_cfg)
            placement = build_placement(variant_run, variant_run.placement, 1)
            self.variants[name] = EngineSetup(variant_cfg, variant_run, placement).variant(name)
        if auto.schedule is not None:  # the fleet at time 0: the schedule's first
            self.initial, self.initial_replicas = auto.schedule[0].engine, auto.schedule[0].replicas
        else:
            require(
                auto.min_replicas <= run.fleet.replicas <= auto.max_replicas,
                "fleet.replicas",
                run.fleet.replicas,
                f"is the autoscaled fleet at time 0: keep it within autoscale.min_replicas "
                f"({auto.min_replicas}) and autoscale.max_replicas ({auto.max_replicas})",
            )
            self.initial, self.initial_replicas = BASE_ENGINE, run.fleet.replicas
        self.log = ScalingLog()
        self.autoscaler: Autoscaler | None = None  # (``connect``)

    @classmethod
    def applies(cls, run: RunConfig) -> bool:
        return run.autoscale.enabled

    def check_servable(
        self, workload: Workload, model_ids: np.ndarray, length_field: tuple[str, Any]
    ) -> list[Scheduler]:
        schedulers = super().check_servable(workload, model_ids, length_field)
        # every engine configuration must serve every request, as the run's own must
        for name, variant in self.variants.items():
            assert variant.scheduler is not None  # (EngineSetup.variant gives it)
            try:
                check_servable(workload, model_ids, [variant.scheduler()], length_field)
            except ConfigError as err:
                raise ConfigError(
                    f"autoscale.engines.{name}", "{...}", f"cannot serve the workload: {err}"
                ) from None
        return schedulers

    def replica_engines(self) -> list[list[Engine]]:
        initial = self.variants[self.initial]
        return [initial.make_engines() for _ in range(self.initial_replicas)]

    def cluster_options(self) -> dict[str, Any]:
        # KV use read mid-stretch would be the stretch's start: step one by one for it
        fast_forward = self.run.sim.fast_forward_decode and self.run.autoscale.policy != "kv"
        return {**super().cluster_options(), "fast_forward_decode": fast_forward}

    def connect(self, cluster: Cluster, seed: int) -> None:
        self.autoscaler = Autoscaler(
            cluster,
            self.run.autoscale,
            self.variants,
            self.variants[self.initial],
            self.log,
        )

    def fault_parts(self) -> FaultParts:
        """Its replicas at time 0 of the initial engine configuration; one back from
        maintenance is rebuilt with its own; the autoscaler replaces the lost ones."""
        autoscaler = self.autoscaler
        assert autoscaler is not None, "faults are connected after the autoscaler"
        return FaultParts(
            gpus=[self.variants[self.initial].gpus] * self.initial_replicas,
            new_engines=lambda i: autoscaler.variant_of(i).make_engines(),
            autoscaler=autoscaler,
        )

    def priced(self) -> Priced:
        # (summarize bills the GPUs the log says the fleet held; its size is the peak)
        return dataclasses.replace(super().priced(), scaling=(self.log, self.run.autoscale))

    def add_to_summary(
        self, summary: dict[str, Any], step_log: StepLog, column: Callable[[str], np.ndarray]
    ) -> None:
        summary["autoscale"]["engines"] = {
            name: variant.description for name, variant in self.variants.items()
        }

    def tables(self) -> dict[str, pa.Table]:
        return {SCALING_FILE: self.log.table()}
