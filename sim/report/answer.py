"""The answer, in one paragraph, before any figure: what to buy, what it costs, how sure.

Written from the inputs' numbers, in plain words:

- a run: what it shows: the deployment and its cost, its latency percentiles against the SLO
  in ``config.yaml`` (``slo``), the share of requests that met every bound with its Wilson
  interval, the goodput, the stability verdict, and how the fleet scaled if it did;
- a plan: the cheapest candidate that meets every SLO at its replica count, its $/hour and $
  per million output tokens, each SLO statistic's interval over the replications, the
  probability of a miss, the headroom, and the next cheapest;
- a sweep: the cheapest run that keeps SLO attainment at ``MIN_SLO_ATTAINMENT`` (as the sweep
  ranks them), with its attainment's interval; one per traffic when the sweep varied the
  traffic (``traffic_groups``), a run being compared only with runs at its traffic;
- a day plan: the cheapest of its three answers that keeps that attainment over the day, its
  $/day against sizing for the peak, the hours in which the plan's SLO (``plan.slo``) held,
  and its worst hour.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from sim.output.model_error import model_error_text
from sim.output.summary_table import _num
from sim.plan.spares import spares_text
from sim.report.assumptions import option_name, pools_text
from sim.report.day_plan import DayAnswer
from sim.report.inputs import DayPlanInput, PlanInput, RunInput, SweepInput, run_labels, varying
from sim.report.intervals import CONFIDENCE, good_requests, wilson
from sim.sweeps.monitor import is_traffic_key

# the sweep monitor's default ranking threshold (hydra.callbacks.sweep_monitor.min_slo_attainment)
MIN_SLO_ATTAINMENT = 0.99
SECONDS_PER_HOUR = 3600.0


def _seconds(x: float | None) -> str:
    return "-" if x is None else f"{_num(x)} s"


def _money(x: float | None) -> str:
    return "-" if x is None else f"${x:,.2f}"


def _gpus(count: object) -> str:
    return f"{count} GPU" if count == 1 else f"{count if count is not None else '?'} GPUs"


def deployment_text(config: Mapping, summary: Mapping) -> str:
    """``4 x H100-SXM (TP 1, 4 GPUs) running meta-llama/Llama-3.1-8B at weights bf16, KV
    bf16, scheduler vllm`` (policies by their config names:
    ``sim.report.assumptions.option_name``)."""
    fleet = config.get("fleet") or {}
    precision = config.get("precision") or {}
    scheduler = option_name("scheduler", (config.get("scheduler") or {}).get("_target_"))
    pp = f" x PP {fleet['pp']}" if (fleet.get("pp") or 1) > 1 else ""
    replicas = fleet.get("replicas", "?")
    gpus = _gpus(summary.get("num_gpus"))
    scaled = summary.get("autoscale")
    if scaled:  # the fleet changed: its range, and the peak's GPUs (summary.num_gpus)
        replicas = f"{scaled.get('replicas_min', '?')}-{scaled.get('replicas_max', '?')}"
        gpus = f"up to {gpus}"
    pools = summary.get("disaggregation")
    if pools:  # two pools, each its own GPUs and scheduler
        return (
            " and ".join(pools_text(pools, name) for name in ("prefill", "decode"))
            + f" ({gpus}) running {(config.get('model') or {}).get('name', '?')}, the KV over "
            f"{(pools.get('kv_link') or {}).get('name', '?')}"
        )
    return (
        f"{replicas} x {(config.get('hardware') or {}).get('name', '?')} "
        f"(TP {fleet.get('tp', 1)}{pp}, {gpus}) running "
        f"{(config.get('model') or {}).get('name', '?')} at weights {precision.get('weights')}, "
        f"KV {precision.get('kv')}, scheduler {scheduler}"
    )


def attainment_text(summary: Mapping) -> str | None:
    """``95 of 100 requests met every SLO bound: 95.0% (95% Wilson interval 88.8% to
    97.8%)``; None when the summary lacks the counts."""
    counts = good_requests(dict(summary))
    found = None if counts is None else wilson(*counts)
    if counts is None or found is None:
        return None
    return (
        f"{counts[0]:,} of {counts[1]:,} requests met every SLO bound: {found.value:.1%} "
        f"({CONFIDENCE:.0%} Wilson interval {found.low:.1%} to {found.high:.1%})"
    )


def latency_text(summary: Mapping, slo: Mapping) -> str:
    """Each latency's p50/p90/p99 and where its p99 sits against the per-request bound."""
    parts = []
    for metric, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E")):
        stats, bound = summary.get(metric) or {}, slo.get(metric)
        if bound is None and metric == "e2e_s":
            continue
        text = (
            f"{label} p50/p90/p99 "
            + "/".join(_num(stats.get(p)) for p in ("p50", "p90", "p99"))
            + " s"
        )
        p99 = stats.get("p99")
        if bound is not None and p99 is not None:
            text += (
                f" (p99 within the {_num(bound)} s bound)"
                if p99 <= bound
                else f" (p99 {p99 / bound:.2g}x the {_num(bound)} s bound)"
            )
        parts.append(text)
    return "; ".join(parts)


def scaling_text(summary: Mapping) -> str | None:
    scaled = summary.get("autoscale")
    if not isinstance(scaled, Mapping):
        return None
    hours = (summary.get("duration_s") or 0.0) / SECONDS_PER_HOUR
    return (
        f"The fleet scaled between {scaled.get('replicas_min', '?')} and "
        f"{scaled.get('replicas_max', '?')} replicas (mean {_num(scaled.get('replicas_mean'))}; "
        f"{scaled.get('scale_ups', '?')} scale-ups, {scaled.get('scale_downs', '?')} "
        f"scale-downs): {_num(scaled.get('gpu_hours'))} GPU-hours and "
        f"{_money(scaled.get('usd_total'))} over the {_num(hours)} h simulated."
    )


def run_answer(run: RunInput) -> str:
    s, c = run.summary, run.config
    cost = s.get("cost") or {}
    stability = s.get("stability") or {}
    offered = stability.get("offered_requests_per_s")
    slo = c.get("slo") or s.get("slo") or {}
    sentences = [
        f"As simulated, {deployment_text(c, s)} served {s.get('num_requests', 0):,} requests"
        + (f" offered at {_num(offered)} req/s" if offered else "")
        + f" for {_money(cost.get('usd_per_hour'))}/hour, "
        f"{_money(cost.get('usd_per_million_output_tokens'))} per million output tokens.",
        latency_text(s, slo) + ".",
    ]
    attained = attainment_text(s)
    if attained:
        sentences.append(
            f"{attained}; goodput {_num(s.get('goodput_requests_per_s'))} req/s of "
            f"{_num((s.get('throughput') or {}).get('requests_per_s'))} req/s completed."
        )
    if stability.get("verdict"):
        sentences.append(f"The fleet was {stability['verdict']}: {stability.get('reason', '')}.")
    sentences.append(scaling_text(s) or "")
    sentences.append(
        "This is one deployment, not a search: fleetcast plan finds the cheapest that meets "
        "the SLO."
    )
    return " ".join(x for x in sentences if x)


def ranked(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    feasible = [c for c in candidates if c.get("feasible") and c.get("usd_per_hour") is not None]
    return sorted(feasible, key=lambda c: (c["usd_per_hour"], c["candidate"]))


def plan_answer(plan: PlanInput, chosen: RunInput | None) -> str:
    """``chosen``: a simulation of the best candidate at its count (names its deployment)."""
    p = plan.plan
    slos = ", ".join(p.get("slo") or []) or "no SLO recorded"
    feasible = ranked(plan.candidates)
    if not feasible:
        reasons = "; ".join(f"{c.get('candidate')}: {c.get('reason')}" for c in plan.candidates)
        return (
            f"None of the {len(plan.candidates)} candidate(s) meets every SLO ({slos}): "
            f"{reasons or 'no candidates recorded'}."
        )
    best = feasible[0]
    what = (
        deployment_text(chosen.config, chosen.summary)
        if chosen is not None
        else f"{best['replicas']} replica(s) of {best['candidate']}"
    )
    sentences = [
        f"Buy {what} (candidate {best['candidate']}): {_money(best['usd_per_hour'])}/hour, "
        f"{_money(best.get('usd_per_million_output_tokens'))} per million output tokens, the "
        f"cheapest of the {len(feasible)} of {len(plan.candidates)} candidate(s) that meet every "
        f"SLO ({slos}).",
    ]
    stats = [
        f"{name.split()[0]} {_num(s.get('mean'))} [{_num(s.get('ci_low'))}, "
        f"{_num(s.get('ci_high'))}] against {_num(s.get('bound'))}"
        for name, s in (best.get("slo") or {}).items()
    ]
    confidence = p.get("confidence", CONFIDENCE)
    if stats:
        sentences.append(
            f"How sure: over {best.get('replications', '?')} replications, with "
            f"{confidence:.0%} intervals, " + "; ".join(stats) + "."
        )
    if best.get("miss_probability") is not None:
        allowed = p.get("max_miss_probability")
        sentences.append(
            f"{best['miss_probability']:.0%} of the replications missed an SLO"
            + (f" (the plan allows {allowed:.0%})" if allowed is not None else "")
            + "."
        )
    room = best.get("headroom")
    if room:
        up, past = room.get("stable_up_to_rate_x"), room.get("not_stable_at_rate_x")
        sentences.append(
            f"Headroom: stable up to {_num(up)}x the rate"
            + (f", not at {_num(past)}x." if past else " (no knee found that far).")
        )
    to_slo = best.get("slo_headroom")
    if to_slo and to_slo.get("meets_up_to_rate_x") is not None:
        missed = to_slo.get("misses_at_rate_x")
        sentences.append(
            f"Headroom to the SLO: every SLO met up to {_num(to_slo['meets_up_to_rate_x'])}x "
            "the rate" + (f", missed at {_num(missed)}x." if missed else " (none missed).")
        )
    if best.get("model_error"):  # plan.model_error=measured
        sentences.append(
            "The model's own error: "
            + model_error_text(best["model_error"], lambda n: "infeasible" if n is None else str(n))
            + "."
        )
    if best.get("spares"):  # plan.faults.availability: k from the rates, N + k's tier mix
        sentences.append(
            "Spare capacity: " + spares_text(best["load_replicas"], best["spares"]) + "."
        )
    elif best.get("spare_replicas") is not None:
        faults = best.get("faults") or {}
        given = []
        if faults.get("gpu_mtbf_h"):
            given.append(
                f"a GPU failing every {_num(faults['gpu_mtbf_h'])} hours, repaired in "
                f"{_num(faults.get('repair_h'))} hours"
            )
        if faults.get("spot_reclaims_per_h"):
            given.append(
                f"each spot replica reclaimed {_num(faults['spot_reclaims_per_h'])} times an hour"
            )
        rates = ", ".join(given) or "the scheduled failures, drains and reclaims"
        sentences.append(
            f"Spare capacity: N = {best['load_replicas']} replica(s) for the load, "
            f"k = {best['spare_replicas']} for failures at these rates ({rates})."
        )
    if len(feasible) > 1:
        runner = feasible[1]
        more = runner["usd_per_hour"] / best["usd_per_hour"] - 1
        sentences.append(
            f"Next cheapest: {runner['candidate']} at {runner['replicas']} replica(s), "
            f"{_money(runner['usd_per_hour'])}/hour ({more:+.0%})."
        )
    return " ".join(sentences)


def attainment_by_run(runs: pd.DataFrame) -> pd.Series:
    """Each run's SLO attainment (NaN where unknown), as the sweep ranks them."""
    columns = ["goodput_requests_per_s", "duration_s", "num_requests"]

    def share(row: pd.Series) -> float:
        counts = good_requests({k: (None if pd.isna(row.get(k)) else row.get(k)) for k in columns})
        return float("nan") if counts is None else counts[0] / counts[1]

    return runs.apply(share, axis=1) if len(runs) else pd.Series(dtype=float)


def traffic_groups(runs: pd.DataFrame, swept: list[str]) -> pd.Series:
    """Each run's traffic (``sim.sweeps.monitor.TRAFFIC_KEYS``: the workload and the arrival
    rate's what-if), named by the swept traffic settings in which the runs differ
    (``workload.rate_scale=4``); ``""`` for every run when they share one traffic. A run is
    ranked only against runs at its traffic: at 4x the rate one fleet serves 4x the tokens
    per dollar, which makes it busier, not cheaper."""
    keys = [k for k in swept if is_traffic_key(k)]
    if not varying(runs, keys, set()):
        return pd.Series("", index=runs.index, dtype=object)
    return run_labels(runs, keys, set())


def sweep_choice(runs: pd.DataFrame, attained: pd.Series) -> object | None:
    """The run id of the cheapest run ($/hour, then $/M output tokens) keeping attainment."""
    keeping = runs[attained >= MIN_SLO_ATTAINMENT]
    if len(keeping) == 0:
        return None
    order = keeping.sort_values(
        ["cost.usd_per_hour", "cost.usd_per_million_output_tokens", "run_id"], kind="stable"
    )
    return order["run_id"].iloc[0]


def sweep_choices(
    runs: pd.DataFrame, attained: pd.Series, traffic: pd.Series
) -> dict[str, object | None]:
    """Each traffic's ``sweep_choice`` among its own runs (``traffic_groups``), the traffics
    in the order of their first run."""
    return {
        str(t): sweep_choice(runs[traffic == t], attained[traffic == t])
        for t in dict.fromkeys(traffic)
    }


def sweep_answer(sweep: SweepInput, attained: pd.Series, choices: dict[str, object | None]) -> str:
    """What the sweep found; ``choices`` is ``sweep_choices``: one answer per traffic."""
    runs = sweep.runs
    keys = varying(runs, sweep.swept_keys, set())
    swept = "; ".join(f"{k} {', '.join(map(str, sorted(runs[k].dropna().unique())))}" for k in keys)
    keeping = int((attained >= MIN_SLO_ATTAINMENT).sum())
    head = (
        f"Of {len(runs)} runs (swept: {swept or 'nothing varies'}), {keeping} keep SLO "
        f"attainment at or above {MIN_SLO_ATTAINMENT:.0%}."
    )
    if list(choices) == [""]:  # one traffic
        return f"{head} {_sweep_pick(sweep, runs, attained, choices[''], keys)}"
    traffic = traffic_groups(runs, sweep.swept_keys)
    others = [k for k in keys if not is_traffic_key(k)]
    parts = [head, "A run is ranked only against the runs offered the same traffic."]
    for name, chosen in choices.items():
        mine = traffic == name
        kept = int((attained[mine] >= MIN_SLO_ATTAINMENT).sum())
        pick = _sweep_pick(sweep, runs[mine], attained[mine], chosen, others)
        parts.append(f"At {name}, {kept} of {int(mine.sum())} keep it: {pick[0].lower()}{pick[1:]}")
    return " ".join(parts)


def _sweep_pick(
    sweep: SweepInput, runs: pd.DataFrame, attained: pd.Series, chosen: object, keys: list[str]
) -> str:
    """The sentence on ``chosen`` among ``runs``, labelled by ``keys`` (or on the best of
    them when none keeps attainment)."""
    if chosen is None:
        if not attained.notna().any():
            return "No run records its SLO attainment."
        best = runs.loc[attained.idxmax()]
        return (
            f"None does; the best, run {best['run_id']}, reaches {attained.max():.1%}: add "
            "replicas or a faster GPU."
        )
    row = runs[runs["run_id"].astype(str) == str(chosen)].iloc[0]
    run = sweep.run(chosen)
    what = deployment_text(run.config, run.summary) if run is not None else f"run {chosen}"
    labels = ", ".join(f"{k}={row[k]}" for k in keys)
    flat = {k: (None if pd.isna(v) else v) for k, v in row.items()}
    attained_text = attainment_text(flat) or "attainment unknown"
    return (
        f"The cheapest of them is run {chosen}" + (f" ({labels})" if labels else "") + f": "
        f"{what}, {_money(flat.get('cost.usd_per_hour'))}/hour, "
        f"{_money(flat.get('cost.usd_per_million_output_tokens'))} per million output tokens; "
        f"TTFT p99 {_seconds(flat.get('ttft_s.p99'))}, "
        f"TPOT p99 {_seconds(flat.get('tpot_s.p99'))}; {attained_text}."
    )


def _keeps(answer: DayAnswer) -> bool:
    """The answer keeps ``MIN_SLO_ATTAINMENT`` over the day and, where the day plan says,
    the plan's own SLO (``plan.slo``) in every hour with requests."""
    every_hour = (
        answer.hours_plan_slo_met is None
        or answer.hours_with_requests is None
        or answer.hours_plan_slo_met >= answer.hours_with_requests
    )
    return every_hour and (answer.slo_attainment or 0.0) >= MIN_SLO_ATTAINMENT


def day_choice(answers: Mapping[str, DayAnswer]) -> DayAnswer | None:
    """The cheapest answer that keeps the SLOs (``_keeps``), else the one that held
    ``plan.slo`` in the most hours, then with the best attainment."""
    priced = [a for a in answers.values() if a.usd_per_day is not None]
    keeping = [a for a in priced if _keeps(a)]
    if keeping:
        return min(keeping, key=lambda a: (a.usd_per_day, a.name))
    known = [a for a in answers.values() if a.slo_attainment is not None]
    return (
        max(known, key=lambda a: (a.hours_plan_slo_met or 0, a.slo_attainment or 0.0))
        if known
        else None
    )


def _per_million(answer: DayAnswer, run: RunInput | None) -> float | None:
    """$ per million output tokens over the answer's day: what its run cost (the scaled
    fleet's bill, or a fixed fleet's $/hour over the span) over the tokens it served."""
    if run is None or answer.usd_per_day is None:
        return None
    s = run.summary
    span_s = s.get("duration_s") or 0.0
    tokens = ((s.get("throughput") or {}).get("output_tokens_per_s") or 0.0) * span_s
    spent = (s.get("autoscale") or {}).get("usd_total")
    if spent is None and (s.get("cost") or {}).get("usd_per_hour") is not None:
        spent = s["cost"]["usd_per_hour"] * span_s / SECONDS_PER_HOUR
    if not tokens or spent is None:
        return None
    return spent / (tokens / 1e6)


def day_answer(day: DayPlanInput) -> str:
    plan = day.plan
    best = day_choice(plan.answers)
    if best is None:
        return "The day plan records no answer with a cost or an SLO attainment."
    run = day.runs.get(best.name)
    keeps = _keeps(best)
    peak = plan.answers.get("peak")
    saving = plan.saving_vs_peak.get(best.name)
    opening = (
        f"Buy the {best.name} fleet"
        if keeps
        else f"No answer keeps {MIN_SLO_ATTAINMENT:.0%} SLO attainment and plan.slo in every "
        f"hour; the best is the {best.name} fleet"
    )
    if run is not None:
        opening += f" ({deployment_text(run.config, run.summary)})"
    figures = [f"{_money(best.usd_per_day)}/day"]
    if best.gpu_hours is not None:
        figures.append(f"{_num(best.gpu_hours)} GPU-hours")
    per_million = _per_million(best, run)
    if per_million is not None:
        figures.append(f"{_money(per_million)} per million output tokens")
    if saving is not None and peak is not None and best.name != "peak":
        figures.append(
            f"{saving:.0%} less than sizing for the peak all day ({_money(peak.usd_per_day)}/day)"
        )
    sentences = [f"{opening}: {', '.join(figures)}."]
    if best.slo_attainment is not None:
        low, high = best.slo_attainment_low, best.slo_attainment_high
        if low is not None and high is not None:
            overall: str | None = f"{CONFIDENCE:.0%} Wilson interval {low:.2%} to {high:.2%}"
        else:
            overall = attainment_text(run.summary) if run is not None else None
        sentences.append(
            f"How sure: SLO attainment (the share of requests within every slo.* bound) "
            f"{best.slo_attainment:.2%} over the day" + (f" ({overall})" if overall else "") + "."
        )
    if best.hours_plan_slo_met is not None and best.hours_with_requests is not None:
        slo = f" ({', '.join(plan.plan_slo)})" if plan.plan_slo else ""
        sentences.append(
            f"plan.slo{slo} held in {best.hours_plan_slo_met} of {best.hours_with_requests} "
            "hours (each hour's statistics over its requests)."
        )
    hours = [h for h in best.hourly if h.attainment is not None and h.requests != 0]
    if hours:
        # the lowest share; among equal shares the least sure (the lowest bound)
        worst = min(hours, key=lambda h: (h.attainment or 0.0, h.low if h.low is not None else 1.0))
        interval = (
            f" [{worst.low:.1%}, {worst.high:.1%}]"
            if worst.low is not None and worst.high is not None
            else ""
        )
        sentences.append(
            f"Its worst hour is {worst.hour:g}:00 at {worst.attainment:.1%}{interval}."
        )
    others = [
        f"{a.name} {_money(a.usd_per_day)}/day"
        + (f" ({a.slo_attainment:.2%} attainment" if a.slo_attainment is not None else " (")
        + (
            f", plan.slo held in {a.hours_plan_slo_met} of {a.hours_with_requests} hours)"
            if a.hours_plan_slo_met is not None and a.hours_with_requests is not None
            else ")"
        )
        for a in plan.answers.values()
        if a.name != best.name
    ]
    if others:
        sentences.append("The others: " + "; ".join(others) + ".")
    if plan.note:
        sentences.append(f"Note: {plan.note}.")
    if best.name == "seasonal" and plan.periods:
        sentences.append(
            "Its periods: "
            + "; ".join(
                f"{p.label}: {p.replicas} x {' '.join(p.candidate) or 'the base fleet'} "
                f"({_money(p.usd_per_hour)}/hour)"
                for p in plan.periods
            )
            + "."
        )
    return " ".join(sentences)
