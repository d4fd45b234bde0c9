"""What a plan searches: its candidates (every combination of ``plan.grid``, as overrides, and
those listed in ``plan.candidates``; at most ``MAX_CANDIDATES``), the keys the planner sets
itself and no candidate may (``PLANNED``), and the fewest replicas each candidate's fleet can
have (a disaggregated fleet's prefill pool and one decode replica), where its search starts.

Every candidate is checked before any simulation runs (``checked_fewest``). Composing a config
with Hydra takes a quarter of a second, so composing each of 1,000 candidates took minutes
before the plan printed anything; candidates that differ only in plain values (``
scheduler.max_num_seqs=64`` against ``=128``) compose alike, so one of each kind is composed
(``composition_kind``), and the overrides of every one are still checked.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import sys
import time
from collections.abc import Callable
from typing import Any

from sim.config.tiers import fewest, needs_rest
from sim.errors import ConfigError, require

# keys the planner sets for every simulation: a candidate or the base may not
PLANNED = ("fleet.replicas", "seed")
# The most candidates a plan takes. Each is a search of its own (a thread, sim.plan.rounds)
# that runs at least plan.min_replications simulations at each count its bisection tries
# (about log2(plan.max_replicas)), so 1,000 candidates are already some 20,000 simulations,
# hours on one machine; a grid past it is nearly always a list of values written out as a
# range, and is answered better by a narrower grid, or by several plans.
MAX_CANDIDATES = 1000
# From this many candidates, checking them says so on stderr first (it takes seconds).
SAY_CHECKING_FROM = 100
# the config group whose settings give a fleet's fewest replicas (fewest_replicas)
FLEET_SHAPE_GROUP = "placement"


def refuse_planned(overrides: list[str], keep_replicas: bool = False) -> None:
    """ConfigError on the first override of a key the planner sets itself (``fleet.replicas``
    allowed with ``keep_replicas``: a capacity plan's fleet is the one given)."""
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        require(
            key not in PLANNED or (keep_replicas and key == "fleet.replicas"),
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
    simulated. A fleet bought at price tiers (``sim.config.tiers``) has at least the replicas
    its mix fixes, and the searched size goes to the mix's ``rest`` tier. ConfigError for a
    decode pool of a fixed size, or a mix without ``rest``."""
    placement = cfg.get("placement") or {}
    if placement.get("mode") != "disaggregated":
        mix = (cfg.get("fleet") or {}).get("tiers")
        needs_rest(mix, "fleet.tiers")
        return max(1, fewest(mix)) if mix else 1
    decode = (placement.get("decode") or {}).get("replicas")
    if decode is not None:
        raise ConfigError(
            "placement.decode.replicas",
            decode,
            "fleetcast plan searches fleet.replicas, both pools together, with the decode pool "
            "the rest: leave it null and plan over placement.prefill.replicas",
        )
    prefill = (placement.get("prefill") or {}).get("replicas") or 1
    decode_mix = (placement.get("decode") or {}).get("tiers")
    needs_rest(decode_mix, "placement.decode.tiers")  # (the prefill pool's size is fixed)
    return int(prefill) + (max(1, fewest(decode_mix)) if decode_mix else 1)


def every_candidate(grid: dict[str, list[Any]], listed: list[list[str]]) -> list[list[str]]:
    """A plan's candidates: every combination of ``grid`` (its one empty candidate left out
    when candidates are ``listed``), then ``listed``; a ConfigError past ``MAX_CANDIDATES``,
    before any is made."""
    sizes = _grid_sizes(grid)
    total = (math.prod(sizes) if sizes or not listed else 0) + len(listed)
    if total > MAX_CANDIDATES:
        shape = " x ".join(f"{size} {key}" for size, key in zip(sizes, grid, strict=True))
        raise ConfigError(
            "plan.grid" if sizes else "plan.candidates",
            shape or f"{len(listed)} listed",
            f"gives {total:,} candidates, more than the {MAX_CANDIDATES:,} a plan takes: each "
            "is a search of its own, at least plan.min_replications simulations at each count "
            "it tries; narrow the grid's lists, or plan the candidates in parts",
        )
    return [c for c in candidates(grid) if c or not listed] + listed


def _grid_sizes(grid: dict[str, list[Any]]) -> list[int]:
    """How many values each key of the grid gives; ConfigError for a key the planner sets, or
    for values that are not a non-empty list."""
    for key, values in grid.items():
        require(key not in PLANNED, f"plan.grid.{key}", values, "fleetcast plan sets it")
        require(
            isinstance(values, list) and bool(values),
            f"plan.grid.{key}",
            values,
            "give a non-empty list of values",
        )
    return [len(values) for values in grid.values()]


def candidates(grid: dict[str, list[Any]]) -> list[list[str]]:
    """Every combination of the grid, as overrides (one empty candidate for no grid)."""
    _grid_sizes(grid)
    keys = list(grid)
    return [
        [f"{k}={_text(v)}" for k, v in zip(keys, combo, strict=True)]
        for combo in itertools.product(*(grid[k] for k in keys))
    ]


_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _text(value: Any) -> str:
    """A grid value as an override's value: a mapping or a list in Hydra's grammar (a
    mapping's keys bare, as Hydra reads them; its values and a list's items bare words or
    JSON), anything else as written."""
    return _nested(value) if isinstance(value, (dict, list)) else str(value)


def _nested(value: Any) -> str:
    if isinstance(value, str) and _BARE.fullmatch(value) and value not in ("true", "false", "null"):
        return value  # (a word reads as itself: {on_demand: rest})
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {_nested(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_nested(item) for item in value) + "]"
    return json.dumps(value)


def composition_kind(override: str) -> str:
    """What of ``override`` can change whether a config composes and its fleet's fewest
    replicas: a plain value (a key of no config group's choosing, outside ``placement``, set
    to a scalar with no interpolation) only by its key, since Hydra sets any scalar there as it
    sets another (its grammar is ``check_overrides``'s); anything else (a group's option, an
    added or deleted key, a list, a mapping, an interpolation) as written."""
    from sim.resources import config_dir

    key, sep, value = override.partition("=")
    plain = (
        sep
        and not key.startswith(("+", "~"))
        and key.split(".")[0] != FLEET_SHAPE_GROUP
        and key != "experiment"
        and not (config_dir() / key).is_dir()
        and "${" not in value
        and not value.lstrip().startswith(("[", "{"))
    )
    return f"{key}=<value>" if plain else override


def checked_fewest(
    base: list[str], each: list[list[str]], compose: Callable[[list[str]], dict[str, Any]]
) -> list[int]:
    """Each candidate's overrides checked (``refuse_planned``, ``check_overrides``) and its
    fleet's fewest replicas (``fewest_replicas`` of its config as ``compose`` composes it),
    composing one candidate of each ``composition_kind`` (all of them when the base holds an
    interpolation, which a candidate's plain value could feed). ConfigError on the first
    problem."""
    from sim.config.compose import check_overrides

    started = time.monotonic()
    alike = not any("${" in override for override in base)
    kinds = [tuple(composition_kind(o) for o in c) if alike else (i,) for i, c in enumerate(each)]
    loud = len(each) >= SAY_CHECKING_FROM
    if loud:
        print(
            f"checking {len(each):,} candidates ({len(set(kinds)):,} configs to compose)...",
            file=sys.stderr,
            flush=True,
        )
    fewest: dict[object, int] = {}
    for candidate, kind in zip(each, kinds, strict=True):
        refuse_planned(candidate)
        check_overrides([*base, *candidate])
        if kind not in fewest:  # (what only a run finds: the candidate's answer)
            fewest[kind] = fewest_replicas(compose([*base, *candidate]))
    if loud:
        print(
            f"checked in {time.monotonic() - started:.0f} s; planning them: the first answer "
            "comes once each candidate's search has run its first simulations",
            file=sys.stderr,
            flush=True,
        )
    return [fewest[kind] for kind in kinds]
