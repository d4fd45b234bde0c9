"""A fleet bought at price tiers (``sim.config.tiers``): its replicas grouped by tier, each
tier's GPUs at that tier's price (``sim.output.cost.tier_price``), and the cost block's
``per_tier`` (``tier_bill``).

A shape builds its groups when it is built, so that a mix that does not add up to the replicas,
or a tier the price table has no price for on this GPU, is refused before anything runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sim.catalog.hardware import GPU
from sim.config.schema import CostConfig
from sim.config.tiers import resolve
from sim.deploy.shape import ReplicaGroup
from sim.output.cost import tier_price

# a pool of a fleet whose other pool has a mix, when it has none: bought on demand
ON_DEMAND_MIX = {"on_demand": "rest"}


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
