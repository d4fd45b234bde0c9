"""What the fleet costs: rented GPU-hours, and optionally the electricity they draw.

A run's fleet is ``num_gpus`` GPUs of one type, paid by the GPU-hour for the whole simulated
span whether they are busy or idle (rented capacity is paid for either way). From that one
number, ``usd_per_hour = num_gpus × usd_per_gpu_hour``, and the run's throughput, come the unit
costs that cost calculators quote:

- ``usd_per_million_output_tokens``: $ per million output tokens *if output tokens paid for
  everything*: the whole fleet cost divided by the output-token rate. Likewise
  ``usd_per_million_input_tokens`` with the prompt tokens. The two are not meant to be added:
  each charges the full bill to one kind of token (calculators do the same; a split between
  prefill and decode work would need a model of who pays for what).
- A disaggregated fleet has that model: each pool does one kind of work, so each pool's bill
  goes to the tokens it works on (``split_by_pool``): the prefill pool's $/hour over the prompt
  tokens, the decode pool's over the output tokens. The two figures add up to the bill
  (``input rate x $/M input + output rate x $/M output = $/hour``). It splits by work, not by
  memory: the decode pool also holds each prompt's KV, so long prompts raise its cost per
  output token; the first output token, computed by the prefill pool, is counted as decode's.
- ``usd_per_thousand_good_requests``: the fleet cost per thousand completed requests that met
  every SLO (goodput), so a fleet that is cheap but slow is not rewarded.
- ``gpu_hours_per_day``: with ``requests_per_day`` set, the GPU-hours per day this configuration
  needs for that traffic, scaling the simulated fleet linearly:
  ``num_gpus × 24 × requests_per_day / (86400 × requests_per_s)``. Linear scaling is right when
  the run was loaded as the real fleet would be (same per-replica load); a lightly loaded run
  overstates the need, and an overloaded one (requests left unfinished) understates it.

The $/GPU-hour comes from the first of: ``cost.usd_per_gpu_hour`` (your price); the price
table ``cost.prices[gpu name][cost.tier]`` when a tier is chosen and the table lists it; the
hardware catalog's ``usd_per_gpu_hour`` (its on-demand list price, or your
``hardware.usd_per_gpu_hour=`` override). ``price_source`` in the output names the one used.

A fleet bought at price tiers (``fleet.tiers``, a pool's ``tiers``: ``sim.config.tiers``)
pays each replica's GPUs its tier's price instead (``tier_price``): the table's, or for
``on_demand`` of a GPU the table does not list the catalog's own price. A tier the table gives
no price for on that GPU is refused, never guessed, and so is a single price
(``cost.usd_per_gpu_hour``, ``cost.tier``) beside a mix. The block then adds ``per_tier``, each
tier's replicas, GPUs and bill, adding up to the fleet's.

Energy (optional): each GPU draws ``idle_power_fraction × TDP`` when idle and its TDP when busy,
linear in between in the replicas' busy fraction (the share of the span its replica was running
steps); ``pue`` adds the datacenter's cooling and power-delivery overhead. It is reported beside
the rental bill (``usd_per_hour_with_energy``), not folded into the per-token figures, because
cloud prices already include power; it matters when the GPU price is an owned, amortised one.

Left out: per-second vs per-hour billing granularity, minimum reservation sizes, host CPU,
memory, storage and network egress, the power of the rest of the server (only the GPUs' TDP is
counted), and spot interruptions (a spot replica is priced as spot and serves like any
other). A fleet that scales (``autoscale``) is billed for the GPUs it
held, moment by moment.
"""

from __future__ import annotations

from sim.catalog.hardware import GPU
from sim.config.schema import CostConfig, EnergyConfig
from sim.config.tiers import TIERS
from sim.errors import ConfigError, require

__all__ = ["TIERS"]  # (the tier names, sim.config.tiers: the price table's columns)

_SECONDS_PER_HOUR = 3600.0
_HOURS_PER_DAY = 24.0
_SECONDS_PER_DAY = 86400.0
_W_PER_KW = 1000.0


def gpu_price(cost: CostConfig, gpu: GPU) -> tuple[float, str | None, str]:
    """The $/GPU-hour this run pays, the table tier it came from (None if not the table), and
    the config field it came from (precedence in the module docstring)."""
    if cost.usd_per_gpu_hour is not None:
        return cost.usd_per_gpu_hour, None, "cost.usd_per_gpu_hour"
    if cost.tier is not None:
        listed = cost.prices.get(gpu.name)
        price = None if listed is None else getattr(listed, cost.tier)
        if price is not None:
            return price, cost.tier, f"cost.prices.{gpu.name}.{cost.tier}"
        # A GPU the table does not list (a custom hardware file) still gets a price.
    return gpu.usd_per_gpu_hour, None, "hardware.usd_per_gpu_hour"


def tier_price(cost: CostConfig, gpu: GPU, tier: str, field: str) -> tuple[float, str]:
    """The $/GPU-hour of ``tier`` for ``gpu`` (``sim.config.tiers``) and the config field it
    came from: the price table's, the catalog's own price standing for ``on_demand`` of a GPU
    the table does not list (it is the on-demand list price). ConfigError (naming ``field``,
    the mix that asks for it) for a tier the table gives no price for this GPU: a price is never
    made up; and for a single price (``cost.usd_per_gpu_hour``, ``cost.tier``) beside a mix."""
    for single in ("usd_per_gpu_hour", "tier"):
        require(
            getattr(cost, single) is None,
            f"cost.{single}",
            getattr(cost, single),
            f"prices the whole fleet alike, but {field} bills each replica at its tier: set "
            "one of the two",
        )
    listed = cost.prices.get(gpu.name)
    price = None if listed is None else getattr(listed, tier)
    if price is not None:
        return price, f"cost.prices.{gpu.name}.{tier}"
    if tier == "on_demand":
        return gpu.usd_per_gpu_hour, "hardware.usd_per_gpu_hour"
    raise ConfigError(
        field,
        tier,
        f"the price list (cost=...) has no {tier} price for {gpu.name}: give yours as "
        f"cost.prices.{gpu.name}.{tier}=<$/GPU-hour>, choose a list that has one, or leave "
        "the tier out",
    )


def _per(numerator: float, denominator: float | None) -> float | None:
    """numerator / denominator, or None when the denominator is missing or zero."""
    return numerator / denominator if denominator else None


def usd_per_million_tokens(usd_per_hour: float, tokens_per_s: float | None) -> float | None:
    """$ per million tokens for a bill of ``usd_per_hour`` over ``tokens_per_s`` tokens a
    second; None without tokens."""
    return _per(usd_per_hour / _SECONDS_PER_HOUR * 1e6, tokens_per_s)


def split_by_pool(
    prefill_usd_per_hour: float,
    decode_usd_per_hour: float,
    input_tokens_per_s: float | None,
    output_tokens_per_s: float | None,
) -> tuple[float | None, float | None]:
    """A disaggregated fleet's $ per million input tokens (its prefill pool's bill) and per
    million output tokens (its decode pool's): the split in the module docstring."""
    return (
        usd_per_million_tokens(prefill_usd_per_hour, input_tokens_per_s),
        usd_per_million_tokens(decode_usd_per_hour, output_tokens_per_s),
    )


def energy_cost(
    energy: EnergyConfig, gpu: GPU, *, num_gpus: float, gpu_busy_fraction: float | None
) -> dict:
    """Average power per GPU, the fleet's kWh per hour with PUE, and its $/hour."""
    # A run with no span has no busy time: its GPUs sit idle.
    busy = gpu_busy_fraction or 0.0
    assert 0.0 <= busy <= 1.0 + 1e-9, f"gpu_busy_fraction {busy} outside [0, 1]"
    busy = min(busy, 1.0)  # summed step times can overshoot the span by a rounding error
    idle = energy.idle_power_fraction
    kw_per_gpu = gpu.power_w / _W_PER_KW * (idle + (1.0 - idle) * busy)
    kwh_per_hour = kw_per_gpu * num_gpus * energy.pue  # kW sustained for an hour = kWh
    return {
        "kw_per_gpu": kw_per_gpu,
        "kwh_per_hour": kwh_per_hour,
        "usd_per_hour": kwh_per_hour * energy.usd_per_kwh,
    }


def fleet_cost(
    cost: CostConfig,
    gpu: GPU,
    *,
    num_gpus: int,
    duration_s: float,
    completed_requests: int,
    good_requests: int,
    input_tokens: float,
    output_tokens: float,
    gpu_busy_fraction: float | None,
    billed: tuple[float, float] | None = None,
    per_tier: dict[str, dict[str, float | int]] | None = None,
    tiers_source: str | None = None,
) -> dict:
    """The summary's ``cost`` block for ``num_gpus`` GPUs over ``duration_s`` seconds.

    Token and request counts are of completed requests; ``good_requests`` those that met every
    SLO. Rates are counts / ``duration_s``; a figure whose denominator is zero (no span, no
    tokens, no good requests) is None.

    ``billed``: a fleet whose size changed (``sim.output.scaling``), its GPUs and $/hour
    averaged over the span; ``usd_per_hour`` is then the span's bill over its hours (mixed GPU
    types each at their price), ``usd_per_gpu_hour`` that over the mean GPUs.

    ``per_tier``: a fleet of price tiers, each tier's replicas, GPUs, $/hour and $/GPU-hour
    (``sim.deploy.shape.tier_bill``), the whole billed as ``billed`` says; the block
    then names its tier (``mixed`` for more than one) and ``tiers_source`` (the mix's config
    field) as its price source, and adds ``per_tier``. None: no such key (outputs as before).
    """
    usd_per_gpu_hour, tier, source = gpu_price(cost, gpu)
    if per_tier is not None:  # (its $/GPU-hour is the bill's, from ``billed``)
        tier, source = _tier_name(per_tier), tiers_source or source
    usd_per_hour = num_gpus * usd_per_gpu_hour
    mean_gpus: float = num_gpus
    if billed is not None:
        mean_gpus, usd_per_hour = billed
        usd_per_gpu_hour = usd_per_hour / mean_gpus if mean_gpus else usd_per_gpu_hour

    def per_s(count: float) -> float | None:
        return count / duration_s if duration_s > 0 else None

    usd_per_s = usd_per_hour / _SECONDS_PER_HOUR
    out_per_s, in_per_s = per_s(output_tokens), per_s(input_tokens)
    good_per_s, requests_per_s = per_s(good_requests), per_s(completed_requests)
    energy = (
        energy_cost(cost.energy, gpu, num_gpus=mean_gpus, gpu_busy_fraction=gpu_busy_fraction)
        if cost.energy is not None and cost.energy.enabled
        else None
    )
    gpu_hours_per_day = None
    if cost.requests_per_day is not None and requests_per_s:
        # how many copies of this fleet the daily traffic keeps busy, times its GPU-hours a day
        gpu_hours_per_day = (
            mean_gpus * _HOURS_PER_DAY * cost.requests_per_day / (_SECONDS_PER_DAY * requests_per_s)
        )
    block = {
        "usd_per_gpu_hour": usd_per_gpu_hour,
        "tier": tier,
        "price_source": source,
        "usd_per_hour": usd_per_hour,
        "usd_per_hour_with_energy": usd_per_hour + (energy["usd_per_hour"] if energy else 0.0),
        "usd_per_million_output_tokens": usd_per_million_tokens(usd_per_hour, out_per_s),
        "usd_per_million_input_tokens": usd_per_million_tokens(usd_per_hour, in_per_s),
        "usd_per_thousand_good_requests": _per(usd_per_s * 1e3, good_per_s),
        "gpu_hours_per_day": gpu_hours_per_day,
        "energy": energy,
    }
    if per_tier is not None:
        block["per_tier"] = per_tier
    return block


def _tier_name(per_tier: dict[str, dict[str, float | int]]) -> str:
    """A fleet's tier in the cost block: its one tier, or ``mixed``."""
    return next(iter(per_tier)) if len(per_tier) == 1 else "mixed"
