"""The two pools of a disaggregated fleet (``placement=disaggregated``), and the link between them.

A prefill pool computes prompts; a decode pool generates. Each pool is the run's own deployment
with the pool's changes (``placement.prefill.*``, ``placement.decode.*``: its GPU, TP, weight
and KV precision, scheduler, and any other engine key under ``settings``), so each has its own
memory plan, step-time model and price. Both serve the one model of the run.

Replica counts: ``placement.prefill.replicas`` (default 1); ``placement.decode.replicas``,
null by default, is the rest of ``fleet.replicas``, so a sweep or a plan over ``fleet.replicas``
grows the decode pool at a fixed prefill pool. Set explicitly, the pools must add up to
``fleet.replicas``.

The KV link (``placement.kv_link``) is a catalog name or ``{gb_per_s, latency_us}``. Every
GPU has its own link (one NIC per GPU, as in a DGX/HGX H100 node: eight 400 Gb/s ConnectX-7
NICs for eight GPUs), so a transfer between replicas of ``p`` and ``d`` GPUs runs over
``min(p, d)`` links in parallel, each GPU pair moving its share of the KV.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sim.catalog.deployment import Deployment, build_deployment
from sim.catalog.hardware import GPU
from sim.config.compose import with_settings
from sim.config.schema import DisaggregatedPlacement, PoolConfig, RunConfig, validate_run
from sim.errors import ConfigError, require

# Links between nodes, per GPU and each way (decimal GB/s), and a one-way latency. "nvlink"
# is the GPU's own NVLink figures from the hardware catalog (both pools in one node).
NETWORK_LINKS: dict[str, tuple[float, float, str]] = {
    "infiniband": (
        50.0,
        5.0,
        "NDR InfiniBand, 400 Gb/s per GPU (NVIDIA ConnectX-7 product brief, 2022: 400 Gb/s "
        "ports; DGX H100 user guide: eight ConnectX-7 compute ports for eight GPUs); latency: "
        "a few microseconds for a one-sided RDMA write end to end",
    ),
    "roce": (
        50.0,
        10.0,
        "RoCE v2 over 400 GbE, one port per GPU (ConnectX-7 in Ethernet mode); latency: a "
        "switched Ethernet hop's few microseconds added to RDMA's",
    ),
    "ethernet": (
        12.5,
        50.0,
        "100 GbE with TCP (12.5 GB/s line rate per GPU); latency: a kernel TCP round trip's "
        "tens of microseconds",
    ),
}


@dataclass(frozen=True)
class KvLink:
    """Where the KV moves from a prefill replica to a decode replica."""

    name: str
    bytes_per_s: float  # per GPU, each way
    latency_s: float
    source: str


@dataclass(frozen=True)
class Pool:
    """One pool: its config (the run's, with the pool's changes), deployment and size."""

    name: str
    cfg: dict[str, Any]
    run: RunConfig
    deployment: Deployment
    replicas: int


# the run's fields a pool sets by a key of its own (placement.decode.tp sets the pool's fleet.tp)
POOL_KEYS = {
    "hardware": "hardware",
    "fleet.tp": "tp",
    "precision.weights": "weights",
    "precision.kv": "kv_precision",
    "scheduler": "scheduler",
}


def pool_settings(pool: PoolConfig) -> dict[str, Any]:
    """The pool's changes as engine settings over the run's config (``with_settings``)."""
    named = {field: getattr(pool, key) for field, key in POOL_KEYS.items()}
    return {**{k: v for k, v in named.items() if v is not None}, **(pool.settings or {})}


def in_pool_terms(err: ConfigError, name: str, pool: PoolConfig) -> ConfigError:
    """``err``, raised while building the ``name`` pool, in the pool's terms: a field the pool
    sets is named by the pool's key (``placement.decode.tp``, not ``fleet.tp``), and so are the
    fixes its reason suggests; a field the pool inherits keeps the run's name."""
    prefix = f"placement.{name}"
    field = err.field.removeprefix(f"{prefix}.settings.")
    own = _own_keys(pool, prefix)
    field = own.get(field, err.field)
    reason = err.reason
    # fixes a reason suggests (raise fleet.tp, precision.weights=fp8) for a key the pool sets
    # itself (not every word "scheduler" or "hardware" of a reason)
    for run_field in ("fleet.tp", "precision.weights", "precision.kv"):
        if run_field in own:
            reason = re.sub(rf"\b{re.escape(run_field)}\b", own[run_field], reason)
    return ConfigError(field, err.value, f"in the {name} pool: {reason}")


def _own_keys(pool: PoolConfig, prefix: str) -> dict[str, str]:
    """The run's fields ``pool`` sets itself, each with the key it sets it by (a key under
    ``settings`` wins over the pool's own key, as in ``pool_settings``)."""
    own = {
        field: f"{prefix}.{key}"
        for field, key in POOL_KEYS.items()
        if getattr(pool, key) is not None
    }
    own.update({field: f"{prefix}.settings.{field}" for field in pool.settings or {}})
    return own


def build_pools(cfg: dict[str, Any], run: RunConfig) -> tuple[Pool, Pool]:
    """The prefill and decode pools of ``run`` (its placement is disaggregated)."""
    placement = run.placement
    assert isinstance(placement, DisaggregatedPlacement)
    prefill_replicas, decode_replicas = pool_replicas(run)
    pools = []
    for name, pool, count in (
        ("prefill", placement.prefill, prefill_replicas),
        ("decode", placement.decode, decode_replicas),
    ):
        field = f"placement.{name}"
        try:
            pool_cfg = with_settings(
                cfg, pool_settings(pool), f"{field}.settings", f"{field}.replicas gives the count"
            )
            # a pool is one model's fleet: its own config must not be disaggregated again
            pool_cfg["placement"] = {"mode": "single"}
            pool_run = validate_run(pool_cfg)
            deployment = build_deployment(pool_run)
        except ConfigError as err:
            raise in_pool_terms(err, name, pool) from None
        pools.append(Pool(name, pool_cfg, pool_run, deployment, count))
    return pools[0], pools[1]


def pool_replicas(run: RunConfig) -> tuple[int, int]:
    """The prefill and decode pools' replica counts of ``run`` (its placement is
    disaggregated): ConfigError when they do not make ``fleet.replicas``."""
    placement = run.placement
    assert isinstance(placement, DisaggregatedPlacement)
    total = run.fleet.replicas
    prefill_replicas = placement.prefill.replicas or 1
    decode_replicas = placement.decode.replicas
    if decode_replicas is None:
        decode_replicas = total - prefill_replicas
        require(
            decode_replicas >= 1,
            "placement.prefill.replicas",
            prefill_replicas,
            f"leaves no decode replica of fleet.replicas={total}: raise fleet.replicas",
        )
    elif prefill_replicas + decode_replicas != total:
        raise ConfigError(
            "placement.decode.replicas",
            decode_replicas,
            f"the pools ({prefill_replicas} prefill + {decode_replicas} decode) must add up to "
            f"fleet.replicas={total}: set fleet.replicas={prefill_replicas + decode_replicas}, "
            "or leave placement.decode.replicas null",
        )
    return prefill_replicas, decode_replicas


def kv_link(placement: DisaggregatedPlacement, prefill_gpu: GPU, decode_gpu: GPU) -> KvLink:
    """The link ``placement.kv_link`` names, per GPU."""
    link = placement.kv_link
    if not isinstance(link, str):
        return KvLink("custom", link.gb_per_s * 1e9, link.latency_us * 1e-6, "placement.kv_link")
    if link == "nvlink":
        # both pools in one NVLink domain: the slower GPU's NVLink figures
        slower = min((prefill_gpu, decode_gpu), key=lambda g: g.interconnect_bytes_per_s)
        return KvLink(
            "nvlink",
            slower.interconnect_bytes_per_s,
            slower.interconnect_latency_s,
            f"{slower.name} NVLink (hardware catalog)",
        )
    gb_per_s, latency_us, source = NETWORK_LINKS[link]
    return KvLink(link, gb_per_s * 1e9, latency_us * 1e-6, source)
