"""The highest arrival rate one fleet serves at its SLOs: ``fleetcast plan plan.solve=max_rate``.

The fleet is the config as given (its ``fleet.replicas`` included); its rate is raised and
lowered by ``sim.arrival_rate_scale`` (the same requests, each arriving that much sooner: the
rate what-ifs' scaling, so every multiple sees the same traffic's luck under each seed, common
random numbers across rates). The highest multiple that meets is bracketed and bisected in
ratio (``sim.plan.rate_search``), each multiple decided by its replications as the fleet-size
search decides a count (``sim.plan.replications``: every SLO statistic's interval on the right
side, at most ``plan.max_miss_probability`` of the replications missing, mostly ``stable``).

The capacity's interval: each replication of the answer (one seed's traffic) has its own
highest multiple at which its run meets every SLO and is ``stable``, searched the same way on
that replication alone (most of its simulations are the plan's own, asked for again); the
Student-t interval over these replications' capacities is the interval of the fleet's mean
capacity. The answer itself is the plan's decision, so it sits at or below that mean: the
decision asks the intervals of the SLO statistics to clear their bounds.

What the plan writes: ``plan.json`` (``solve``, the fleet's ``replicas`` and ``capacity``: the
multiple, requests/s and tokens/s at it, how the bracket ended, the interval, each multiple
tried) and ``plan.parquet`` (one row per simulation, ``scenario`` ``rate xK``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pyarrow as pa

from sim.output.summary_table import _num
from sim.plan.files import simulation_columns, slo_json, write_plan
from sim.plan.rate_search import (
    FOUND,
    MEETS_AT_HIGHEST,
    MISSES_AT_LOWEST,
    Bracket,
    highest_meeting,
)
from sim.plan.replications import Point, evaluate, t_interval, unusable
from sim.plan.rounds import Rounds
from sim.plan.runs import Job, Simulations
from sim.plan.settings import MAX_RATE, PlanConfig, Prepared
from sim.plan.slo import Constraint, parse

SCENARIO = "rate x{:g}"  # plan.parquet's scenario of a simulation at a rate multiple
CANDIDATE = "base"  # plan.parquet's candidate: the fleet as given (a plan's empty candidate)


@dataclass
class Capacity:
    """One fleet's capacity search: where its bracket ended, the plan's decision at each
    multiple tried, each of the answer's replications' own bracket, and every simulation's
    summary by (multiple, replication)."""

    replicas: int
    bracket: Bracket
    points: dict[float, Point]
    own: list[Bracket] = field(default_factory=list)
    seen: dict[tuple[float, int], dict[str, Any]] = field(default_factory=dict)

    @property
    def chosen(self) -> Point | None:
        """The plan's point at the answer (None: the SLO fails at the lowest multiple)."""
        meets = self.bracket.meets
        return None if meets is None else self.points[meets]


def holds(summary: dict[str, Any], constraints: list[Constraint]) -> bool:
    """One replication meets every SLO and its latencies are a steady state's."""
    return not unusable(summary) and all(c.met_by(c.value(summary)) for c in constraints)


def fleet_capacity(
    sims: Simulations,
    constraints: list[Constraint],
    plan: PlanConfig,
    replicas: int,
    say: Callable[[str], None] = lambda line: None,
    candidate: Sequence[str] = (),
    interval: bool = True,
) -> Capacity:
    """The search (module docstring) for the fleet of ``replicas`` (with a plan's
    ``candidate`` overrides: a cheapest-fleet answer's headroom to the SLO), from a search
    thread of ``sims.rounds``; ``say`` gets a line per multiple decided. Without
    ``interval``, no replication's own capacity is searched."""
    capacity = Capacity(replicas, Bracket(None, None, MISSES_AT_LOWEST), {})

    def runs(k: float, replications: list[int]) -> list[dict[str, Any]]:
        extra = [*candidate, f"sim.arrival_rate_scale={k:g}"]
        found = sims.summaries(extra, replicas, replications)
        capacity.seen.update({(k, r): s for r, s in zip(replications, found, strict=True)})
        return found

    def meets(k: float) -> bool:
        point = evaluate(
            replicas,
            lambda r: runs(k, [r])[0],
            constraints,
            min_replications=plan.min_replications,
            max_replications=plan.max_replications,
            confidence=plan.confidence,
            max_miss_probability=plan.max_miss_probability,
            fetch=lambda rs: runs(k, rs),
        )
        capacity.points[k] = point
        say(f"[{SCENARIO.format(k)}] {point.decision}: {point.reason} ({point.replications} runs)")
        return point.decision == "meets"

    def search(ok: Callable[[float], bool]) -> Bracket:
        return highest_meeting(ok, plan.max_rate_factor, plan.min_rate_factor, plan.rate_tolerance)

    def own(replication: int) -> Bracket:
        """One replication's own capacity: the same search on its runs alone."""
        return search(lambda k: holds(runs(k, [replication])[0], constraints))

    capacity.bracket = search(meets)
    chosen = capacity.chosen
    if interval and capacity.bracket.outcome == FOUND and chosen is not None:
        capacity.own = sims.rounds.parallel([partial(own, r) for r in range(chosen.replications)])
    return capacity


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _offered(summary: dict[str, Any]) -> float | None:
    """The requests/s that arrived in a run (its stability block's offered rate)."""
    value = (summary.get("stability") or {}).get("offered_requests_per_s")
    return None if value is None else float(value)


def _interval(values: list[float], confidence: float) -> dict[str, float]:
    mean, low, high = t_interval(values, confidence)
    return {"mean": mean, "ci_low": low, "ci_high": high}


def capacity_json(capacity: Capacity, plan: PlanConfig) -> dict[str, Any]:
    """``plan.json``'s ``capacity`` (docs/reference/outputs.md lists its keys)."""
    bracket = capacity.bracket
    out: dict[str, Any] = {
        "outcome": bracket.outcome,
        "rate_x": bracket.meets,
        "misses_at_rate_x": bracket.misses,
        "min_rate_factor": plan.min_rate_factor,
        "max_rate_factor": plan.max_rate_factor,
        "rate_tolerance": plan.rate_tolerance,
        # the config's own rate (multiple 1), as its runs offered it
        "base_requests_per_s": _mean(
            [_offered(s) for (k, _), s in capacity.seen.items() if k == 1]
        ),
        "evaluated": [
            {
                "rate_x": k,
                "decision": p.decision,
                "reason": p.reason,
                "replications": p.replications,
            }
            for k, p in sorted(capacity.points.items())
        ],
    }
    chosen = capacity.chosen
    if chosen is None:
        return out
    throughput = [s.get("throughput") or {} for s in chosen.summaries]
    output = [t.get("output_tokens_per_s") for t in throughput]
    total = [t.get("total_tokens_per_s") for t in throughput]
    out.update(
        requests_per_s=_mean([_offered(s) for s in chosen.summaries]),
        input_tokens_per_s=_mean(
            [None if t is None or o is None else t - o for t, o in zip(total, output, strict=True)]
        ),
        output_tokens_per_s=_mean(output),
        replications=chosen.replications,
        miss_probability=chosen.miss_probability,
        verdicts=[(s.get("stability") or {}).get("verdict") for s in chosen.summaries],
        slo=slo_json(chosen, plan.confidence),
        interval=None,
    )
    own = [b.meets for b in capacity.own]
    if bracket.meets is not None and capacity.own and all(b.outcome == FOUND for b in capacity.own):
        # each replication's requests/s per multiple: its arrivals scale exactly with it
        factors = [float(k) for k in own if k is not None]
        offered = [_offered(capacity.seen[(bracket.meets, r)]) for r in range(len(factors))]
        out["per_replication_rate_x"] = factors
        out["interval"] = {
            "rate_x": _interval(factors, plan.confidence),
            "requests_per_s": None
            if None in offered
            else _interval(
                [k * float(p or 0) / bracket.meets for k, p in zip(factors, offered, strict=True)],
                plan.confidence,
            ),
        }
    return out


def capacity_rows(capacity: Capacity, seed: int) -> pa.Table:
    """``plan.parquet``: one row per simulation, by multiple then replication; ``decision``
    is the multiple's, for the replications it was decided on (empty for those only a
    replication's own search ran)."""
    rows = []
    for (k, r), summary in sorted(capacity.seen.items()):
        point = capacity.points.get(k)
        decided = point is not None and r < point.replications
        head = {"candidate": CANDIDATE, "scenario": SCENARIO.format(k), "rate_x": k}
        decision = point.decision if decided and point is not None else None
        rows.append(
            {**head, **simulation_columns(capacity.replicas, r, seed + r, summary, decision)}
        )
    names = list(dict.fromkeys(name for row in rows for name in row))
    return pa.Table.from_pylist([{name: row.get(name) for name in names} for row in rows])


def capacity_text(plan_json: dict[str, Any]) -> str:
    """The printed answer: the capacity, how its bracket ended, its interval and SLOs."""
    c = plan_json["capacity"]
    slos = ", ".join(plan_json["slo"])
    head = (
        f"capacity of the fleet as given ({plan_json['replicas']} replica(s)) at every SLO "
        f"({slos}), {plan_json['confidence']:.0%} intervals:"
    )
    base = c.get("base_requests_per_s")

    def rate(k: float) -> str:
        return f"x{k:.4g} the config's rate" + (f" = {_num(k * base)} requests/s" if base else "")

    if c["outcome"] == MISSES_AT_LOWEST:
        return "\n".join(
            [
                head,
                "  none found: the SLO fails at the lowest rate tried, "
                f"{rate(c['misses_at_rate_x'])} (plan.min_rate_factor)",
            ]
        )
    lines = [head]
    if c["outcome"] == MEETS_AT_HIGHEST:
        lines.append(
            f"  at least {rate(c['rate_x'])}: every SLO holds at the highest rate allowed "
            "(plan.max_rate_factor)"
        )
    else:
        lines.append(
            f"  found: {_num(c['requests_per_s'])} requests/s, x{c['rate_x']:.4g} the config's "
            f"rate; it misses at x{c['misses_at_rate_x']:.4g} (plan.rate_tolerance="
            f"{c['rate_tolerance']:g})"
        )
    lines.append(
        f"  tokens/s at it: {_num(c['input_tokens_per_s'])} input, "
        f"{_num(c['output_tokens_per_s'])} output"
    )
    interval = c.get("interval")
    if interval:
        x, rps = interval["rate_x"], interval.get("requests_per_s")
        line = f"  per replication: x{_num(x['mean'])} [{_num(x['ci_low'])}, {_num(x['ci_high'])}]"
        if rps:
            line += (
                f" = {_num(rps['mean'])} [{_num(rps['ci_low'])}, {_num(rps['ci_high'])}] requests/s"
            )
        lines.append(f"{line} over {c['replications']} replications")
    stats = "; ".join(
        f"{name.split()[0]} {_num(s['mean'])} [{_num(s['ci_low'])}, {_num(s['ci_high'])}] "
        f"against {_num(s['bound'])}"
        for name, s in c["slo"].items()
    )
    lines.append(f"  at it: {stats}; P(miss) {c['miss_probability']:.0%} of {c['replications']}")
    return "\n".join(lines)


def plan_capacity(
    prepared: Prepared, launch: Callable[[list[Job]], Sequence[dict[str, Any]]], progress: bool
) -> dict[str, Any]:
    """Run a prepared capacity plan, its simulations launched in rounds by ``launch``; write
    ``plan.parquet`` and ``plan.json`` into its folder and return ``plan.json``'s object."""
    plan = prepared.plan
    assert prepared.replicas is not None, "a capacity plan's fleet has its replica count"
    constraints = [parse(text) for text in plan.slo]
    sims = Simulations(prepared.base, prepared.seed, Rounds(launch))

    def say(line: str) -> None:
        if progress:
            print(line, file=sys.stderr, flush=True)

    replicas = prepared.replicas
    (capacity,) = sims.rounds.run([lambda: fleet_capacity(sims, constraints, plan, replicas, say)])
    plan_json = {
        "solve": MAX_RATE,
        "slo": [str(c) for c in constraints],
        "confidence": plan.confidence,
        "max_miss_probability": plan.max_miss_probability,
        "base_overrides": prepared.base,
        "seed": prepared.seed,
        "replicas": replicas,
        "capacity": capacity_json(capacity, plan),
    }
    write_plan(prepared.folder, capacity_rows(capacity, prepared.seed), plan_json)
    return plan_json
