"""How a plan writes its files: ``plan.json``'s SLO statistics of a point and
``plan.parquet``'s columns of a simulation, for a cheapest-fleet plan (``sim.plan.answer``) and
a capacity plan (``sim.plan.capacity``) alike, and both files written whole."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sim.plan.replications import Point
from sim.sweeps.runs import flatten


def slo_json(point: Point, confidence: float) -> dict[str, dict[str, float | None]]:
    """Each SLO statistic of ``point`` by its constraint's text: its bound, and the mean and
    ``confidence`` interval over the point's replications (None while one lacks it)."""
    out: dict[str, dict[str, float | None]] = {}
    for stat in point.statistics:
        found = stat.interval(confidence)
        out[str(stat.constraint)] = {
            "bound": stat.constraint.bound,
            "mean": None if found is None else found[0],
            "ci_low": None if found is None else found[1],
            "ci_high": None if found is None else found[2],
        }
    return out


def simulation_columns(
    replicas: int, replication: int, seed: int, summary: dict[str, Any], decision: str | None
) -> dict[str, Any]:
    """A ``plan.parquet`` row after its candidate, scenario and grid columns: the replica
    count, replication, its seed, the point's decision and every summary number flattened as
    ``fleetcast collect`` does."""
    rest: dict[str, Any] = {
        "replicas": replicas,
        "replication": replication,
        "seed": seed,
        "decision": decision,
    }
    for name, value in flatten(summary, keep_lists=False).items():
        if isinstance(value, (int, float, str)) or value is None:
            rest[name] = value
    return rest


def write_plan(folder: Path, table: pa.Table, plan_json: dict[str, Any]) -> None:
    """``plan.parquet`` (``table``) and then ``plan.json`` into ``folder``, each written whole
    (a partial file renamed into place): a plan.json there means the plan finished."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / ".plan.parquet.partial"
    pq.write_table(table, tmp)
    tmp.replace(folder / "plan.parquet")
    tmp = folder / ".plan.json.partial"
    tmp.write_text(json.dumps(plan_json, indent=1) + "\n")
    tmp.replace(folder / "plan.json")
