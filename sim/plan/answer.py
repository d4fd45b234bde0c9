"""What a plan found, and how it is written and shown: per candidate its answer (the chosen
replica count and every point evaluated, the what-ifs, the headroom; a disaggregated fleet's
pools, named ``2P1D: prefill 2 x H100-SXM $5.98/h, decode 1 x H200 $3.80/h``), as
``plan.json``'s object, as ``plan.parquet``'s rows (one per simulation) and as the ranked
table. Candidates rank by summary.json's ``cost.usd_per_hour``, which prices a disaggregated
fleet's pools each at its own GPU's price."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sim.output.model_error import MODEL_ERROR_PREFIX, Band, model_error_text, no_band_note
from sim.output.summary_table import _num
from sim.plan.files import simulation_columns, slo_json
from sim.plan.replications import Point
from sim.plan.settings import PlanConfig
from sim.plan.spares import spares_text

if TYPE_CHECKING:  # (an answer's headroom to the SLO is a capacity search's result)
    from sim.plan.capacity import Capacity


@dataclass(frozen=True)
class ModelError:
    """A candidate's class of deployment and its step-time error band (None: no validation
    rows for its step-time model)."""

    klass: dict[str, str]
    band: Band | None

    def json(self) -> dict[str, Any]:
        return {"class": self.klass, "band": None if self.band is None else self.band.json()}

    @classmethod
    def from_json(cls, given: dict[str, Any]) -> ModelError:
        band = given["band"]
        return cls(given["class"], None if band is None else Band.from_json(band, given["class"]))


@dataclass
class Answer:
    """One candidate's result."""

    label: str
    overrides: list[str]
    replicas: int | None  # None: infeasible within max_replicas
    points: dict[int, Point]
    reason: str
    # what-if name -> (its smallest count or None, its points)
    whatifs: dict[str, tuple[int | None, dict[int, Point]]] = field(default_factory=dict)
    # rate multiple -> the chosen fleet's summary at it (one replication)
    headroom: dict[float, dict[str, Any]] = field(default_factory=dict)
    # the chosen fleet's highest rate multiple within every SLO (plan.slo_headroom); None: not
    # searched, or refused
    slo_headroom: Capacity | None = None
    # plan.model_error=measured: the class and band its model-error searches used
    model_error: ModelError | None = None
    # plan.faults.availability: plan.json's spares block (sim.plan.spares.spares_json); the
    # count searched (replicas) is then the load's N, without faults
    spares: dict[str, Any] | None = None

    @property
    def chosen(self) -> Point | None:
        return None if self.replicas is None else self.points[self.replicas]

    @property
    def pools(self) -> dict[str, dict[str, Any]] | None:
        """A disaggregated answer's pools (``pools_of``); None for a fleet of one pool."""
        chosen = self.chosen
        return None if chosen is None or not chosen.summaries else pools_of(chosen.summaries[0])

    @property
    def fleet(self) -> str | None:
        """A disaggregated answer's pools in words: ``1P2D: prefill 1 x H100-SXM ...``."""
        pools = self.pools
        return None if pools is None else fleet_text(pools)


NO_FAULTS = "no faults"  # the what-if of a plan with faults: the same fleet never failing


def spare_capacity(answer_json: dict[str, Any]) -> dict[str, Any] | None:
    """With faults on, the answer's split: ``load_replicas`` (N, the count the load needs
    without faults), ``spare_replicas`` (k, the rest) and the fault rates; None without."""
    found = answer_json.get("whatifs", {}).get(NO_FAULTS)
    if found is None:
        return None
    load = found["replicas"]
    return {
        "load_replicas": load,
        "spare_replicas": None if load is None else answer_json["replicas"] - load,
    }


def headroom_bounds(seen: dict[float, dict[str, Any]]) -> tuple[float, float | None]:
    """(the largest multiple still stable, the smallest past the knee or None)."""
    bad = sorted(
        k for k, s in seen.items() if (s.get("stability") or {}).get("verdict") != "stable"
    )
    good = [k for k in seen if not bad or k < bad[0]]
    return max(good, default=1.0), (bad[0] if bad else None)


def answer_json(answer: Answer, plan: PlanConfig) -> dict[str, Any]:
    out: dict[str, Any] = {
        "candidate": answer.label,
        "overrides": answer.overrides,
        "feasible": answer.replicas is not None,
        "replicas": answer.replicas,
        "reason": answer.reason,
        "evaluated": [
            {
                "replicas": p.replicas,
                "decision": p.decision,
                "reason": p.reason,
                "replications": p.replications,
            }
            for _, p in sorted(answer.points.items())
        ],
    }
    chosen = answer.chosen
    if chosen is not None:
        costs = [s["cost"] for s in chosen.summaries]
        out["usd_per_hour"] = costs[0]["usd_per_hour"]
        per_million = [c.get("usd_per_million_output_tokens") for c in costs]
        known = [c for c in per_million if c is not None]
        out["usd_per_million_output_tokens"] = sum(known) / len(known) if known else None
        out["replications"] = chosen.replications
        if answer.pools is not None:
            out["pools"] = answer.pools
            out["fleet"] = answer.fleet
        out["miss_probability"] = chosen.miss_probability
        out["verdicts"] = [(s.get("stability") or {}).get("verdict") for s in chosen.summaries]
        out["whatifs"] = {
            name: {
                "replicas": count,
                "evaluated": [
                    {"replicas": p.replicas, "decision": p.decision, "replications": p.replications}
                    for _, p in sorted(pts.items())
                ],
            }
            for name, (count, pts) in answer.whatifs.items()
        }
        if answer.headroom:
            stable_up_to, unstable_at = headroom_bounds(answer.headroom)
            out["headroom"] = {
                "stable_up_to_rate_x": stable_up_to,
                "not_stable_at_rate_x": unstable_at,
                "evaluated": {
                    f"{k:g}": (s.get("stability") or {}).get("verdict")
                    for k, s in sorted(answer.headroom.items())
                },
            }
        if answer.slo_headroom is not None:
            to_slo = answer.slo_headroom
            out["slo_headroom"] = {
                "outcome": to_slo.bracket.outcome,
                "meets_up_to_rate_x": to_slo.bracket.meets,
                "misses_at_rate_x": to_slo.bracket.misses,
                "evaluated": {f"{k:g}": p.decision for k, p in sorted(to_slo.points.items())},
            }
        if answer.model_error is not None:
            out["model_error"] = model_error_json(answer.model_error, answer.whatifs)
        out["slo"] = slo_json(chosen, plan.confidence)
        if answer.spares is not None:
            _with_spares(out, answer.spares)
        spare = spare_capacity(out)
        if spare is not None:
            faults = chosen.summaries[0]["faults"]
            keys = ("gpu_mtbf_h", "repair", "repair_h", "on_failure", "spot_reclaims_per_h")
            out.update(spare, faults={key: faults.get(key) for key in keys})
    return out


def _with_spares(out: dict[str, Any], spares: dict[str, Any]) -> None:
    """An answer's ``plan.json`` entry with its spares (``plan.faults.availability``): the load's
    N as ``load_replicas``, k as ``spare_replicas``, the fleet to run, N + k, as ``replicas``,
    billed at its tier mix's $/hour (``usd_per_hour``; the $ per million output tokens scaled
    alike: the same tokens, the spares' bill added), and the ``spares`` block. A target out of
    reach leaves the answer at N, its spares None and the reason in the block."""
    load = out["replicas"]
    out["load_replicas"], out["spares"] = load, spares
    k = spares.get("spares")
    out["spare_replicas"] = k
    if k is None:
        return
    out["replicas"] = load + k
    scale = spares["usd_per_hour"] / out["usd_per_hour"] if out["usd_per_hour"] else None
    per_million = out["usd_per_million_output_tokens"]
    out["usd_per_hour"] = spares["usd_per_hour"]
    if per_million is not None and scale is not None:
        out["usd_per_million_output_tokens"] = per_million * scale


def model_error_json(
    error: ModelError, whatifs: dict[str, tuple[int | None, dict[int, Point]]]
) -> dict[str, Any]:
    """``plan.json``'s ``model_error`` block: the class, the band (quantiles, n, source, the
    level of the table that answered) and the count at its p50 and at its p90."""
    out: dict[str, Any] = {"class": error.klass, "band": None}
    band = error.band
    if band is None:
        out["note"] = no_band_note(error.klass)
        return out
    out["band"] = band.json()
    for quantile in ("p50", "p90"):
        found = whatifs.get(band.label(quantile))
        out[f"replicas_at_{quantile}"] = None if found is None else found[0]
    return out


def rows_table(answers: list[Answer], seed: int, grid_keys: list[str]) -> pa.Table:
    """``plan.parquet``: one row per simulation. A ``plan.grid`` key's column holds the text of
    its override; where the key is also another column's name (a summary key:
    ``spec_decode.num_draft_tokens``), it is ``config.KEY``, as ``runs.parquet`` names a config
    key beside a summary key, so neither column's values overwrite the other's."""
    rows: list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = []  # head, grid, rest

    def add(
        answer: Answer,
        scenario: str,
        replicas: int,
        replication: int,
        summary: dict,
        decision: str | None,
    ) -> None:
        given = dict(o.split("=", 1) for o in answer.overrides)
        rest = simulation_columns(replicas, replication, seed + replication, summary, decision)
        head = {"candidate": answer.label, "scenario": scenario}
        rows.append((head, {key: given.get(key) for key in grid_keys}, rest))

    for answer in answers:
        scenarios = {"base": answer.points, **{n: p for n, (_, p) in answer.whatifs.items()}}
        for scenario, points in scenarios.items():
            for replicas, point in sorted(points.items()):
                for replication, summary in enumerate(point.summaries):
                    add(answer, scenario, replicas, replication, summary, point.decision)
        for k, summary in sorted(answer.headroom.items()):
            assert answer.replicas is not None
            add(answer, f"headroom rate x{k:g}", answer.replicas, 0, summary, None)
        to_slo = answer.slo_headroom
        if to_slo is None:
            continue
        for (k, r), summary in sorted(to_slo.seen.items()):
            assert answer.replicas is not None
            at = to_slo.points.get(k)
            decided = at.decision if at is not None and r < at.replications else None
            add(answer, f"headroom to SLO rate x{k:g}", answer.replicas, r, summary, decided)
    taken = {name for head, _, rest in rows for name in (*head, *rest)}
    column = {key: f"config.{key}" if key in taken else key for key in grid_keys}
    whole = [
        {**head, **{column[key]: value for key, value in grid.items()}, **rest}
        for head, grid, rest in rows
    ]
    names = list(dict.fromkeys(name for row in whole for name in row))  # every column, in order
    return pa.Table.from_pylist([{name: row.get(name) for name in names} for row in whole])


def ranked_table(plan_json: dict[str, Any]) -> str:
    """Cheapest first; infeasible candidates after, with their reason."""
    feasible = [c for c in plan_json["candidates"] if c["feasible"]]
    feasible.sort(key=lambda c: (c["usd_per_hour"], c["candidate"]))
    confidence = plan_json["confidence"]
    lines = [
        f"{len(feasible)} of {len(plan_json['candidates'])} candidate(s) meet every SLO "
        f"({', '.join(plan_json['slo'])}); cheapest first, {confidence:.0%} intervals:",
    ]
    for rank, c in enumerate(feasible, 1):
        pools = c.get("pools")
        fleet = f" = {c['fleet']}" if pools else ""
        stats = "; ".join(
            f"{name.split()[0]} {_num(s['mean'])} [{_num(s['ci_low'])}, {_num(s['ci_high'])}]"
            for name, s in c["slo"].items()
        )
        lines.append(
            f"{rank:>3}. {c['candidate']}: {c['replicas']} replica(s){fleet}, "
            f"${c['usd_per_hour']:,.2f}/hour, ${_num(c['usd_per_million_output_tokens'])}/M out"
            f"; {stats}; P(miss) {c['miss_probability']:.0%} of {c['replications']}"
        )
        extras = [
            f"{name}: {_count(w['replicas'], pools)}"
            for name, w in c.get("whatifs", {}).items()
            if not name.startswith(MODEL_ERROR_PREFIX)  # (on a line of their own)
        ]
        room = c.get("headroom")
        if room:
            at = room["not_stable_at_rate_x"]
            extras.append(
                f"stable up to x{room['stable_up_to_rate_x']:.3g} the rate, not at x{at:.3g}"
                if at
                else f"stable up to x{room['stable_up_to_rate_x']:.3g} the rate (no knee found)"
            )
        to_slo = c.get("slo_headroom")
        if to_slo:
            met, missed = to_slo["meets_up_to_rate_x"], to_slo["misses_at_rate_x"]
            extras.append(
                f"an SLO missed already at x{missed:.3g} the rate"
                if met is None
                else f"every SLO met up to x{met:.3g} the rate"
                + (f", missed at x{missed:.3g}" if missed else " (no miss that far)")
            )
        if extras:
            lines.append("       what-if: " + "; ".join(extras))
        if "model_error" in c:
            count = partial(_count, pools=pools)
            lines.append("       model error: " + model_error_text(c["model_error"], count))
        if "spares" in c:
            lines.append("       faults: " + spares_text(c["load_replicas"], c["spares"]))
        elif "spare_replicas" in c:
            lines.append("       faults: " + spare_text(c))
    for c in plan_json["candidates"]:
        if not c["feasible"]:
            lines.append(f"  infeasible: {c['candidate']}: {c['reason']}")
    return "\n".join(lines)


def spare_text(c: dict[str, Any]) -> str:
    """``N = 6 for the load, k = 2 for failures at these rates (...)`` of a candidate's
    ``plan.json`` entry with faults."""
    faults = c["faults"]
    given = []
    if faults["gpu_mtbf_h"]:
        given.append(
            f"a GPU failing every {faults['gpu_mtbf_h']:g} h, repaired in "
            f"{faults['repair_h']:g} h ({faults['repair']})"
        )
    if faults.get("spot_reclaims_per_h"):
        given.append(f"each spot replica reclaimed {faults['spot_reclaims_per_h']:g} times an hour")
    rates = ", ".join(given) or "the scheduled events"
    if c["load_replicas"] is None:
        return f"without faults no count meets the SLOs either; with them {c['replicas']}"
    fate = "retried" if faults["on_failure"] == "retry" else "failed"
    return (
        f"N = {c['load_replicas']} for the load, k = {c['spare_replicas']} for failures at "
        f"these rates: {rates}, their requests {fate}"
    )


def _count(replicas: int | None, pools: dict[str, dict[str, Any]] | None) -> str:
    """A what-if's count: ``4``, ``4 (2P2D)`` for a disaggregated fleet, or ``infeasible``."""
    if replicas is None:
        return "infeasible"
    return f"{replicas} ({xpyd(pools, replicas)})" if pools else str(replicas)


# -- a disaggregated fleet's pools (placement=disaggregated) ----------------------------------

POOLS = ("prefill", "decode")


def pools_of(summary: dict[str, Any]) -> dict[str, dict[str, Any]] | None:
    """Each pool's replicas, GPU, GPUs per replica and $/hour, from a disaggregated run's
    summary (None for a fleet of one pool)."""
    block = summary.get("disaggregation")
    if not block:
        return None
    keys = ("replicas", "gpu", "gpus_per_replica", "usd_per_hour")
    return {name: {key: block[name][key] for key in keys} for name in POOLS}


def xpyd(pools: dict[str, dict[str, Any]], total: int | None = None) -> str:
    """``2P1D``; with ``total`` (a what-if's count), the same prefill pool at that total."""
    prefill = pools["prefill"]["replicas"]
    decode = pools["decode"]["replicas"] if total is None else total - prefill
    return f"{prefill}P{decode}D"


def fleet_text(pools: dict[str, dict[str, Any]]) -> str:
    """``2P1D: prefill 2 x H100-SXM $5.98/h, decode 1 x H200 $3.80/h`` (a replica of several
    GPUs: ``(2 GPUs each)``)."""

    def one(name: str) -> str:
        pool = pools[name]
        gpus = pool["gpus_per_replica"]
        each = f" ({gpus} GPUs each)" if gpus > 1 else ""
        return f"{name} {pool['replicas']} x {pool['gpu']}{each} ${pool['usd_per_hour']:,.2f}/h"

    return f"{xpyd(pools)}: {one('prefill')}, {one('decode')}"
