"""What a plan searches: its candidates (every combination of ``plan.grid``, as overrides),
the keys the planner sets itself and no candidate may (``PLANNED``), and the fewest replicas
each candidate's fleet can have (a disaggregated fleet's prefill pool and one decode
replica), where its search starts."""

from __future__ import annotations

import itertools
import json
from typing import Any

from sim.errors import ConfigError, require

# keys the planner sets for every simulation: a candidate or the base may not
PLANNED = ("fleet.replicas", "seed")


def refuse_planned(overrides: list[str]) -> None:
    """ConfigError on the first override of a key the planner sets itself."""
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        require(
            key not in PLANNED,
            key,
            override.split("=", 1)[-1],
            "fleetcast plan sets it (the replica count it searches, the seeds of the "
            "replications; plan.seed gives the first); leave it out",
        )


def fewest_replicas(cfg: dict[str, Any]) -> int:
    """The fewest replicas the fleet of a composed config can have: a disaggregated fleet's
    prefill pool and one decode replica, otherwise 1. The plan searches ``fleet.replicas``,
    both pools together, with the decode pool the rest (``sim.catalog.pools``), so a grid over
    ``placement.prefill.replicas`` and ``placement.decode.hardware`` gives xPyD candidates,
    each searched from ``prefill + 1`` up: a total that leaves no decode replica is never
    simulated. ConfigError for a decode pool of a fixed size."""
    placement = cfg.get("placement") or {}
    if placement.get("mode") != "disaggregated":
        return 1
    decode = (placement.get("decode") or {}).get("replicas")
    if decode is not None:
        raise ConfigError(
            "placement.decode.replicas",
            decode,
            "fleetcast plan searches fleet.replicas, both pools together, with the decode pool "
            "the rest: leave it null and plan over placement.prefill.replicas",
        )
    prefill = (placement.get("prefill") or {}).get("replicas") or 1
    return int(prefill) + 1


def candidates(grid: dict[str, list[Any]]) -> list[list[str]]:
    """Every combination of the grid, as overrides (one empty candidate for no grid)."""
    for key, values in grid.items():
        require(key not in PLANNED, f"plan.grid.{key}", values, "fleetcast plan sets it")
        require(
            isinstance(values, list) and bool(values),
            f"plan.grid.{key}",
            values,
            "give a non-empty list of values",
        )
    keys = list(grid)
    return [
        [f"{k}={_text(v)}" for k, v in zip(keys, combo, strict=True)]
        for combo in itertools.product(*(grid[k] for k in keys))
    ]


def _text(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)
