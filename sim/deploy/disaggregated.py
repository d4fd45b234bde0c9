"""A disaggregated fleet built from its config (``placement=disaggregated``): its two pools'
engines (``sim.catalog.pools`` says what each pool is), the transfer cost between them, the
decode router, each pool priced at its own GPU's rate (or its replicas at their price tiers:
``placement.prefill.tiers`` and ``placement.decode.tiers``: a pool without a mix, beside one
with, is bought on demand), and the summary's ``disaggregation`` block.

The block: per pool, replicas, GPUs (type, TP), KV capacity per replica, $/hour at the pool's
own GPU price, busy fraction (its steps' time over its replica-seconds) and KV use (step-time
weighted mean, and peak) as the fleet-wide figures are defined; ``transfer_s``: each transfer's
duration (start to end: link latency and bytes, less what the layer-by-layer overlap hid);
``transfer_wait_s``: from the first token to the transfer's start (room on the decode replica,
free links), where back-pressure shows; ``handoff_s``: first token to the KV's arrival.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from sim import rng
from sim.catalog.placement import Placement
from sim.catalog.pools import Pool, build_pools, in_pool_terms, kv_link
from sim.config.build import build
from sim.config.compose import load_option
from sim.config.schema import DisaggregatedPlacement, RunConfig
from sim.deploy.engines import EngineSetup
from sim.deploy.shape import FaultParts, FleetShape, Priced, ReplicaGroup, billed
from sim.deploy.tiers import ON_DEMAND_MIX, tier_bill, tier_groups
from sim.engine.scheduler.base import Scheduler
from sim.errors import ConfigError, require
from sim.fleet.admission import check_servable
from sim.fleet.cluster import Cluster
from sim.fleet.disaggregation import Disaggregation, TransferCost
from sim.fleet.replica import Engine
from sim.output.cost import gpu_price
from sim.output.results import distribution
from sim.output.step_log import StepLog, StepTotals
from sim.workload.source import Workload


class DisaggregatedFleet(FleetShape):
    """A disaggregated run's two pools, their engines and the link between them (built from
    the config before the run: every refusal comes first)."""

    moves_kv = True

    def __init__(self, cfg: dict[str, Any], run: RunConfig) -> None:
        super().__init__(cfg, run)
        placement = self.placement_config = run.placement
        assert isinstance(placement, DisaggregatedPlacement)
        _refuse_unmodelled(run)
        self.prefill, self.decode = build_pools(cfg, run)
        for pool in (self.prefill, self.decode):
            scheduler = pool.cfg["scheduler"]["_target_"].rsplit(".", 1)[-1]
            require(
                scheduler != "StaticScheduler",
                f"placement.{pool.name}.scheduler",
                "static",
                "static batching holds a batch's KV until the whole batch ends: it cannot "
                "hand requests over; choose vllm, sglang, trtllm, sarathi or prefill_first",
            )
        prefill, decode = self.prefill.deployment, self.decode.deployment
        set_by = "prefill" if placement.prefill.kv_precision is not None else "decode"
        require(
            prefill.kv_precision == decode.kv_precision,
            f"placement.{set_by}.kv_precision",
            getattr(self, set_by).deployment.kv_precision,
            "the KV moves as the prefill pool wrote it: both pools need the same KV precision"
            f" (prefill {prefill.kv_precision}, decode {decode.kv_precision})",
        )
        require(
            prefill.memory.block_size == decode.memory.block_size,
            "placement.decode.settings",
            f"kv.block_size={decode.memory.block_size}",
            f"both pools need the same KV block size (prefill: {prefill.memory.block_size})",
        )
        with self._in_terms_of("prefill"):
            prefill_setup = EngineSetup(
                self.prefill.cfg, self.prefill.run, _one_model(self.prefill)
            )
            # the scheduler the run asks which requests the fleet can serve (``check_servable``):
            # its options are checked first, in the prefill pool's terms
            self.admission = prefill_setup.scheduler(0)
        with self._in_terms_of("decode"):
            decode_setup = EngineSetup(self.decode.cfg, self.decode.run, _one_model(self.decode))
            # what a prefill replica asks before taking a request (``Scheduler.hand_off_to``):
            # built once, before the decode replicas' own, so that their acceptance draws
            # (``spec_decode.N``) do not depend on the prefill pool's size
            self._decode_reference = decode_setup.scheduler(0)
        self.admission.hand_off_to(self._decode_reference)
        self.setups = (prefill_setup, decode_setup)
        self.engines = prefill_setup  # (the run's own: the one the router's requests meet)
        self.link = link = kv_link(placement, prefill.gpu, decode.gpu)
        kv_per_token_per_gpu = prefill.memory.kv_bytes_per_token_per_gpu
        if prefill_setup.spec is not None:  # a drafter's KV moves with the target's
            kv_per_token_per_gpu += prefill_setup.spec.drafter_kv_bytes_per_token_per_gpu[0]
        self.cost = TransferCost(
            link.bytes_per_s,
            link.latency_s,
            kv_bytes_per_token=kv_per_token_per_gpu * prefill.num_gpus,
            parallel_links=min(prefill.num_gpus, decode.num_gpus),
            num_layers=prefill.model.num_layers,
            overlap=placement.kv_transfer_overlap,
        )
        self._router_cfg = load_option("router", placement.decode_router, "placement.decode_router")
        self.placement = Placement(
            "disaggregated", (prefill,), ((0,),) * self.prefill.replicas, (1.0,)
        )
        # (priced now: a pool's mix that does not add up, or a tier without a price, is refused
        # before the run)
        self.pool_groups = self._price_pools()
        self.transfers: Disaggregation | None = None  # (``connect``)

    def _price_pools(self) -> tuple[list[ReplicaGroup], ...]:
        """Each pool's groups: one at the pool GPU's price, or its replicas by price tier."""
        mixes = [getattr(self.placement_config, pool.name).tiers for pool in self.pools]
        out: list[list[ReplicaGroup]] = []
        for pool, mix in zip(self.pools, mixes, strict=True):
            gpu, gpus = pool.deployment.gpu, pool.deployment.num_gpus
            if all(m is None for m in mixes):
                out.append([ReplicaGroup(pool.replicas, gpus, gpu_price(self.run.cost, gpu)[0])])
            else:
                field = f"placement.{pool.name}.tiers"
                out.append(
                    tier_groups(
                        self.run.cost, mix or ON_DEMAND_MIX, pool.replicas, gpus, gpu, field
                    )
                )
        return tuple(out)

    @property
    def pools(self) -> tuple[Pool, Pool]:
        return self.prefill, self.decode

    @property
    def num_gpus(self) -> int:
        return sum(pool.replicas * pool.deployment.num_gpus for pool in self.pools)

    @contextmanager
    def _in_terms_of(self, name: str) -> Iterator[None]:
        """A config error raised inside, in the ``name`` pool's terms (``in_pool_terms``)."""
        try:
            yield
        except ConfigError as err:
            raise in_pool_terms(err, name, getattr(self.placement_config, name)) from None

    def prefill_scheduler(self) -> Scheduler:
        """A prefill replica's scheduler, handing its requests to the decode pool's kind (its
        options were checked when ``admission`` was built)."""
        scheduler = self.setups[0].scheduler(0)
        scheduler.hand_off_to(self._decode_reference)
        return scheduler

    def replica_engines(self) -> list[list[Engine]]:
        prefill_setup, decode_setup = self.setups
        prefill = [
            [Engine(0, self.prefill_scheduler(), prefill_setup.step_times[0])]
            for _ in range(self.prefill.replicas)
        ]
        return prefill + [[decode_setup.engine(0)] for _ in range(self.decode.replicas)]

    @classmethod
    def applies(cls, run: RunConfig) -> bool:
        return isinstance(run.placement, DisaggregatedPlacement)

    def check_servable(
        self, workload: Workload, model_ids: np.ndarray, length_field: tuple[str, Any]
    ) -> list[Scheduler]:
        # (the prefill pool's scheduler asks the decode pool too: ``hand_off_to``)
        check_servable(workload, model_ids, [self.admission], length_field)
        return [self.admission]

    def replica_pools(self) -> list[str]:
        """Each replica's pool, by replica id: the prefill pool's first."""
        return ["prefill"] * self.prefill.replicas + ["decode"] * self.decode.replicas

    def cluster_options(self) -> dict[str, Any]:
        # the router feeds the prefill pool; the transfers feed the decode pool (``connect``)
        return {**super().cluster_options(), "routed_replicas": self.prefill.replicas}

    def connect(self, cluster: Cluster, seed: int) -> None:
        """The transfers between the cluster's replicas (prefill pool first)."""
        router = build(self._router_cfg, "router", rng=rng.stream(seed, "placement.decode_router"))
        require(
            not getattr(router, "needs_prefix_cache", False),
            "placement.decode_router",
            self._router_cfg["_target_"].rsplit(".", 1)[-1],
            "routes on a prefix cache, which a decode pool does not consult",
        )
        count, replicas = self.prefill.replicas, cluster.replicas
        self.transfers = Disaggregation(
            cluster.env,
            replicas[:count],
            replicas[count:],
            router,
            self.cost,
            end_request=cluster.end_request,
        )

    def fault_parts(self) -> FaultParts:
        """Each pool's replicas at their pool's GPUs, back with their pool's engines; the
        transfers between the pools follow a loss (``Disaggregation.lost``)."""
        prefill_setup, decode_setup = self.setups
        count = self.prefill.replicas

        def new_engines(replica_id: int) -> list[Engine]:
            if replica_id < count:
                return [Engine(0, self.prefill_scheduler(), prefill_setup.step_times[0])]
            return [decode_setup.engine(0)]

        return FaultParts(
            gpus=[pool.deployment.num_gpus for pool in self.pools for _ in range(pool.replicas)],
            new_engines=new_engines,
            transfers=self.transfers,
            pools=self.replica_pools(),
        )

    def replica_groups(self) -> list[ReplicaGroup]:
        """Both pools' groups of replicas billed alike, the prefill pool's first."""
        return [group for groups in self.pool_groups for group in groups]

    def priced(self) -> Priced:
        groups = self.replica_groups()
        per_tier = tier_bill(groups)
        return Priced(
            num_gpus=self.num_gpus,
            num_replicas=self.run.fleet.replicas,
            kv_capacity_tokens=[self.setups[1].kv_capacity_tokens],
            gpu=self.placement.deployments[0].gpu,
            billed=billed(groups),
            per_tier=per_tier,
            tiers_source=None if per_tier is None else POOL_TIERS_KEYS,
        )

    def add_to_summary(
        self, summary: dict[str, Any], step_log: StepLog, column: Callable[[str], np.ndarray]
    ) -> None:
        summary["disaggregation"] = pools = disaggregation_summary(
            self, step_log.pool_totals, column, summary["duration_s"]
        )
        tiered = "per_tier" in summary["cost"]  # (its price source is then the pools' mixes)
        if (
            not tiered
            and pools["prefill"]["usd_per_gpu_hour"] != pools["decode"]["usd_per_gpu_hour"]
        ):
            # the fleet's $/GPU-hour is then a mean over GPUs of two prices
            summary["cost"]["price_source"] = (
                "each pool's GPUs at their own price (disaggregation.*.usd_per_gpu_hour)"
            )


POOL_TIERS_KEYS = "placement.prefill.tiers, placement.decode.tiers"


def _one_model(pool: Pool) -> Placement:
    return Placement("single", (pool.deployment,), ((0,),) * pool.replicas, (1.0,))


def _refuse_unmodelled(run: RunConfig) -> None:
    """What a disaggregated fleet does not model, refused in one line each."""
    if run.fleet.tiers is not None:
        raise ConfigError(
            "fleet.tiers",
            run.fleet.tiers,
            "a disaggregated fleet is bought pool by pool: give placement.prefill.tiers and "
            "placement.decode.tiers instead",
        )
    if run.autoscale.enabled:
        raise ConfigError(
            "autoscale.policy",
            run.autoscale.policy,
            "scales a fleet of one pool: autoscaling disaggregated pools is not modelled",
        )
    if run.frontend.token_s > 0:
        raise ConfigError(
            "frontend.token_s",
            run.frontend.token_s,
            "a frontend is not modelled with placement=disaggregated (set it to 0)",
        )
    if run.kv.prefix_caching:
        raise ConfigError(
            "kv.prefix_caching",
            True,
            "a prefix cache is not modelled across disaggregated pools: use placement=single",
        )


def disaggregation_summary(
    fleet: DisaggregatedFleet,
    pool_totals: dict[str, StepTotals],
    column: Callable[[str], np.ndarray],
    span_s: float,
) -> dict[str, Any]:
    """The block, from the pools, their step totals and the requests table's columns."""
    pools: dict[str, Any] = {}
    for pool, setup, groups in zip(fleet.pools, fleet.setups, fleet.pool_groups, strict=True):
        deployment, totals = pool.deployment, pool_totals[pool.name]
        usd_per_hour = sum(group.usd_per_hour for group in groups)
        # (one group: its own price; price tiers: the pool's mean over its GPUs)
        price = (
            groups[0].usd_per_gpu_hour
            if len(groups) == 1
            else usd_per_hour / sum(group.gpus for group in groups)
        )
        busy = totals.busy_s
        pools[pool.name] = {
            "replicas": pool.replicas,
            "gpu": deployment.gpu.name,
            "gpus_per_replica": deployment.num_gpus,
            "tp": deployment.tp,
            "weights": deployment.weights_precision,
            "kv": deployment.kv_precision,
            "scheduler": pool.cfg["scheduler"]["_target_"].rsplit(".", 1)[-1],
            # (as its engines run it: a draft model's share taken out, sim.deploy.speculation)
            "kv_capacity_tokens": setup.kv_capacity_tokens,
            "usd_per_gpu_hour": price,
            "usd_per_hour": usd_per_hour,
            "gpu_busy_fraction": busy / (span_s * pool.replicas) if span_s > 0 else None,
            "kv_utilization": {
                "mean": totals.kv_busy_s / busy if busy else None,
                "max": totals.kv_peak,
            },
            "num_steps": totals.num_steps,
        }
    start, end = column("transfer_start_s"), column("transfer_end_s")
    first = column("first_token_time_s")
    started = ~np.isnan(start)
    ended = started & ~np.isnan(end)
    link = fleet.link
    return {
        **pools,
        "kv_link": {
            "name": link.name,
            "gb_per_s": link.bytes_per_s / 1e9,
            "latency_us": link.latency_s * 1e6,
            "parallel_links": fleet.cost.parallel_links,
            "overlap": fleet.cost.overlap,
            "source": link.source,
        },
        "kv_bytes_per_token": fleet.cost.kv_bytes_per_token,
        "transfers": int(ended.sum()),
        "transfer_s": distribution(end[ended] - start[ended]),
        "transfer_wait_s": distribution(start[started] - first[started]),
        "handoff_s": distribution(end[ended] - first[ended]),
    }
