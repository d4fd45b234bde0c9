"""A fleet bought at price tiers (``sim.config.tiers``): its replicas grouped by tier, each
tier's GPUs at that tier's price (``sim.output.cost.tier_price``), the cost block's
``per_tier`` (``tier_bill``), and which replicas are spot (``spot_replicas``: those that
``faults.spot_reclaims_per_h`` reclaims).

A shape builds its groups when it is built, so that a mix that does not add up to the replicas,
or a tier the price table has no price for on this GPU, is refused before anything runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sim.catalog.hardware import GPU
from sim.catalog.pools import pool_replicas
from sim.config.schema import CostConfig, DisaggregatedPlacement, RunConfig
from sim.config.tiers import replica_tiers, resolve
from sim.deploy.shape import ReplicaGroup
from sim.output.cost import tier_price

# a pool of a fleet whose other pool has a mix, when it has none: bought on demand
ON_DEMAND_MIX = {"on_demand": "rest"}
SPOT = "spot"


def tier_groups(
    cost: CostConfig,
    mix: Mapping[str, int | str],
    replicas: int,
    gpus_per_replica: int,
    gpu: GPU,
    field: str,
) -> list[ReplicaGroup]:
    """The groups of ``replicas`` replicas (of ``gpus_per_replica`` ``gpu`` each) bought as
    ``mix`` says, in its order; ConfigError naming ``field`` (the mix's config key) for a mix
    that does not make ``replicas`` or a tier without a price for ``gpu``."""
    return [
        ReplicaGroup(count, gpus_per_replica, tier_price(cost, gpu, tier, field)[0], tier)
        for tier, count in resolve(mix, replicas, field).items()
    ]


def tier_bill(groups: Sequence[ReplicaGroup]) -> dict[str, dict[str, float | int]] | None:
    """The cost block's ``per_tier``: each tier, in the order first met, with its replicas,
    GPUs, $/hour and mean $/GPU-hour (a tier may have groups in two pools, of two GPUs); None
    for a fleet at one price (no group has a tier: the summary as before)."""
    if all(group.tier is None for group in groups):
        return None
    out: dict[str, dict[str, float | int]] = {}
    for group in groups:
        assert group.tier is not None, "a fleet's groups all have a tier, or none has"
        row = out.setdefault(
            group.tier, {"replicas": 0, "gpus": 0, "usd_per_gpu_hour": 0.0, "usd_per_hour": 0.0}
        )
        row["replicas"] += group.replicas
        row["gpus"] += group.gpus
        row["usd_per_hour"] += group.usd_per_hour
    for row in out.values():
        row["usd_per_gpu_hour"] = row["usd_per_hour"] / row["gpus"]
    return out


def spot_replicas(run: RunConfig) -> list[int]:
    """The ids of ``run``'s replicas bought spot, in order: as the bill buys them (a fixed
    fleet's ``fleet.tiers``, a disaggregated fleet's pool tiers, prefill pool first, a pool
    without a mix on demand), or every replica when the fleet has no mix and ``cost.tier`` is
    spot; none otherwise. ConfigError for a mix that does not make the fleet (as the bill)."""
    placement = run.placement
    if isinstance(placement, DisaggregatedPlacement):
        pools = (placement.prefill.tiers, placement.decode.tiers)
        if any(mix is not None for mix in pools):
            tiers: list[str] = []
            for name, mix, count in zip(
                ("prefill", "decode"), pools, pool_replicas(run), strict=True
            ):
                field = f"placement.{name}.tiers"
                tiers += replica_tiers(resolve(mix or ON_DEMAND_MIX, count, field))
            return [i for i, tier in enumerate(tiers) if tier == SPOT]
    elif run.fleet.tiers is not None:
        tiers = replica_tiers(resolve(run.fleet.tiers, run.fleet.replicas, "fleet.tiers"))
        return [i for i, tier in enumerate(tiers) if tier == SPOT]
    return list(range(run.fleet.replicas)) if run.cost.tier == SPOT else []
