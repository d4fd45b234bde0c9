"""Price tiers: how a fleet's replicas are bought, each billed at its tier's $/GPU-hour.

A tier mix (``fleet.tiers``; a disaggregated fleet's ``placement.prefill.tiers`` and
``placement.decode.tiers``) maps tier names to replica counts, e.g.
``{reserved_3y: 4, spot: 2, on_demand: rest}``. ``rest`` (one tier at most) takes the replicas
the others leave, zero or more, so one mix reads the same at every fleet size: that is what lets
``fleetcast plan``, which searches the replica count, rank mixes (``fewest``). Without ``rest``
the counts add up to the fleet's (or the pool's) replicas. Replicas take their tiers in the
mix's order, by replica id (``replica_tiers``): the first four reserved, and so on.

The tiers (``TIERS``), each a column of the price table ``cost.prices`` (``sim.output.cost``):

- ``on_demand``: pay by the hour, no commitment;
- ``reserved``: a one-year commitment (the name came before ``reserved_3y`` and stays);
- ``reserved_3y``: a three-year commitment;
- ``spot``: spare capacity at a discount, which the provider may reclaim at short notice.
  Only its price is modelled here; a spot replica serves like any other, until reclaimed
  (``faults.spot_reclaims_per_h``, ``sim.deploy.tiers.spot_replicas``).

A null mix (the default) bills the whole fleet at the run's one price, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from sim.config.validation import MAX_REPLICAS, Int
from sim.errors import ConfigError, require

TIERS = ("on_demand", "reserved", "reserved_3y", "spot")
REST = "rest"  # the count of the tier that takes the replicas the others leave


def check_names(mix: dict[str, int | str]) -> dict[str, int | str]:
    """``mix`` unchanged, or ValueError (the schema's one-line error) for a tier name that is
    not one of ``TIERS``, for a second ``rest``, or for an empty mix."""
    unknown = [name for name in mix if name not in TIERS]
    if unknown:
        raise ValueError(f"unknown tier {unknown[0]!r}: the tiers are {', '.join(TIERS)}")
    if not mix:
        raise ValueError(f"give at least one tier ({', '.join(TIERS)}), or null for none")
    if sum(count == REST for count in mix.values()) > 1:
        raise ValueError(f"only one tier may be {REST!r} (the replicas the others leave)")
    return mix


TierCount = Annotated[Int, Field(ge=0, le=MAX_REPLICAS)] | Literal["rest"]
TierMix = Annotated[dict[str, TierCount], AfterValidator(check_names)]  # (the schema's type)


def resolve(mix: Mapping[str, int | str], replicas: int, field: str) -> dict[str, int]:
    """Each tier's replicas in a fleet (or pool) of ``replicas``, in the mix's order, tiers of
    none left out; ConfigError (naming ``field``) when the counts do not make ``replicas``."""
    fixed = fewest(mix)
    text = _text(mix)
    if REST in mix.values():
        require(
            fixed <= replicas,
            field,
            text,
            f"asks for {fixed} replicas besides {REST!r}, more than the {replicas} there are",
        )
    else:
        require(
            fixed == replicas,
            field,
            text,
            f"counts {fixed} replicas, not the {replicas} there are: make them add up, or let "
            f"one tier be {REST!r}",
        )
    counts = {name: replicas - fixed if n == REST else int(n) for name, n in mix.items()}
    return {name: n for name, n in counts.items() if n > 0}


def fewest(mix: Mapping[str, int | str]) -> int:
    """The replicas a mix's fixed counts ask for (``rest`` may be none)."""
    return sum(int(n) for n in mix.values() if n != REST)


def needs_rest(mix: Mapping[str, int | str] | None, field: str) -> None:
    """ConfigError for a mix without ``rest`` in a fleet whose size is searched
    (``fleetcast plan``): fixed counts fit one size only."""
    if mix is not None and REST not in mix.values():
        raise ConfigError(
            field,
            _text(mix),
            f"fleetcast plan searches the replica count, which fixed counts fit at one size "
            f"only: let one tier be {REST!r}, e.g. {{reserved: 2, on_demand: {REST}}}",
        )


def replica_tiers(counts: Mapping[str, int]) -> list[str]:
    """Each replica's tier by replica id, from ``resolve``'s counts."""
    return [name for name, n in counts.items() for _ in range(n)]


def _text(mix: Mapping[str, int | str]) -> str:
    return "{" + ", ".join(f"{name}: {n}" for name, n in mix.items()) + "}"
