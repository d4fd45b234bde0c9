"""``fleetcast plan ... plan.day.periods=N``: a day of traffic planned three ways, each verified
by simulating the whole day.

The base workload is a ``daily`` one (``workload=daily`` or ``workload=azure_day``: its
hourly rate and lengths, ``sim.workload.day``). The day is split into periods (``N`` found
from the rate curve by ``split_day``, or given as ``[[start_hour, end_hour], ...]``), and each
period is planned as an ordinary plan (every candidate of ``plan.grid``, the smallest count
meeting ``plan.slo`` with replications) on the stationary workload that stands for the period
at its peak hour (``period_workload``, ``plan.day.period_s`` long). The cheapest answer of each
period, and three fleets for the day:

- ``peak``: the answer of the period whose answer costs most (the demand's peak), all day;
- ``seasonal``: each period's answer in its period (``autoscale.policy=schedule``): each
  period's fleet asked for ``autoscale.provision_s`` before the period starts and billed from
  then, a switch of engine configuration running both fleets until the new one is ready. Its
  verified cost is compared with the peak fleet's: when switching costs more than it saves,
  the seasonal answer is the peak fleet (said in ``day_plan.json``), so it never costs more;
- ``autoscaled``: the peak period's candidate under a metric autoscaler
  (``plan.day.autoscale``, its ``autoscale.*`` settings; by default HPA's rule on the request
  rate per replica, its target the highest rate per replica a period's answer was verified to
  carry). Scale ``autoscale.interval_s`` and ``scale_down_window_s`` with the workload's
  ``time_compression``: they are simulated seconds.

With ``plan.faults.availability``, each period's answer is N + k (``sim.plan.spares``): its
load's N and the spares that keep N serving at the failure rates; ``day_plan.json``'s periods
carry both, and the day's fleets run with the k replicas and faults off.

Each is simulated over the whole day into ``answers/NAME/`` (a run folder with
``scaling.parquet``), as a job of the plan's launcher, and reported in ``day_plan.json`` with
its cost per day, GPU-hours and SLO attainment per hour of day with a Wilson interval.
Periods' plans are plan folders of their own in ``periods/START-END/``; their simulations
share ``runs/``, so a rerun resumes.
"""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from sim.config.compose import ENGINE_GROUPS
from sim.config.validation import validate
from sim.config.workload_schema import DailyWorkload
from sim.errors import ConfigError, require
from sim.plan.day_tiers import tiered_bill_text, tiered_day_bill
from sim.plan.hourly import HOURS, hourly_attainment, period_length
from sim.plan.runs import Job
from sim.plan.searches import plan_candidates, without_faults
from sim.plan.settings import DayPlanConfig, PlanConfig, Prepared, load_plan
from sim.workload.day import hourly_rates, period_workload, split_day

DAY_PLAN_FILE = "day_plan.json"
ANSWERS = ("peak", "seasonal", "autoscaled")


def day_periods(day: DayPlanConfig, rates: np.ndarray) -> list[tuple[int, int]]:
    """The periods: found (``split_day``) or given, then checked to cover the day once."""
    if isinstance(day.periods, int):
        return split_day(rates, day.periods)
    assert day.periods is not None
    periods = []
    covered = np.zeros(HOURS, dtype=int)
    for i, period in enumerate(day.periods):
        ok = len(period) == 2 and 0 <= period[0] < HOURS and 0 < period[1] <= HOURS
        require(ok, f"plan.day.periods[{i}]", period, "must be [start_hour, end_hour], 0-24")
        require(
            period[0] != period[1],
            f"plan.day.periods[{i}]",
            period,
            "starts and ends at the same hour: give the whole day as [0, 24]",
        )
        start, end = period
        length = period_length(start, end)
        covered[[(start + k) % HOURS for k in range(length)]] += 1
        periods.append((start, end))
    require(
        bool((covered == 1).all()),
        "plan.day.periods",
        day.periods,
        "must cover each hour of the day exactly once",
    )
    return sorted(periods)


def day_checks(day: DayPlanConfig, cfg: dict[str, Any], each: list[list[str]]) -> list[str]:
    """A day plan's own checks, before any simulation (``cfg``: the composed base, ``each``:
    the candidates); the overrides of its first period's workload, for the planner's example
    run (a whole day of one replica would take long)."""
    workload = cfg["workload"]
    require(
        workload.get("kind") == "daily",
        "plan.day.periods",
        day.periods,
        "plans a day of a `daily` workload: workload=daily or workload=azure_day",
    )
    for candidate in each:
        engine_settings(candidate)
    span = workload["duration_s"] * workload["time_compression"]
    require(
        abs(span - 86400) <= 1 and workload.get("num_requests") is None,
        "workload.duration_s",
        workload["duration_s"],
        "a day plan simulates one day: duration_s x time_compression must be 86400 s "
        f"(it is {span:g} s) and num_requests null",
    )
    for start, end in day_periods(day, hourly_rates(workload)):
        period = period_workload(workload, start, end, day.period_s)
        if period is not None:
            return workload_overrides(workload, period)
    raise ConfigError("workload.qps", workload.get("qps"), "the day has no traffic")


def workload_overrides(base: dict[str, Any], workload: dict[str, Any]) -> list[str]:
    """Overrides that turn the ``base`` daily workload into ``workload`` (``period_workload``'s:
    the same lengths, its own rate, clock and span), compared as the schema reads both."""
    given: dict[str, Any] = validate(DailyWorkload, base, "workload").model_dump()
    out = []
    for key, value in workload.items():
        if given.get(key) != value:
            text = json.dumps(value) if isinstance(value, (list, dict)) else yaml.safe_dump(value)
            out.append(f"workload.{key}={text.strip().removesuffix('...').strip()}")
    return out


def engine_settings(candidate: list[str]) -> dict[str, Any]:
    """A candidate's overrides as an engine configuration of ``autoscale.engines``."""
    settings = {}
    for override in candidate:
        key, _, value = override.partition("=")
        key = key.lstrip("+")
        require(
            key.split(".")[0] in ENGINE_GROUPS and key != "fleet.replicas",
            "plan.grid",
            override,
            "a day plan switches engine configurations between periods: its candidates may set "
            + ", ".join(f"{g}.*" for g in ENGINE_GROUPS),
        )
        settings[key] = yaml.safe_load(value)
    return settings


def plan_day(prepared: Prepared, launch: Any, progress: bool) -> dict[str, Any]:
    """The day plan (module docstring): each period planned, three answers simulated over the
    day; writes ``day_plan.json`` and returns its object."""
    plan, folder = prepared.plan, prepared.folder
    day = plan.day
    assert prepared.day_workload is not None  # prepare() composed it (no Hydra in here)
    cfg = {"workload": prepared.day_workload}
    spec: DailyWorkload = validate(DailyWorkload, cfg["workload"], "workload")
    rates = hourly_rates(spec)
    periods = day_periods(day, rates)
    settings = [engine_settings(c) for c in prepared.candidates]
    chosen: list[dict[str, Any]] = []
    for start, end in periods:
        length = period_length(start, end)
        period_rates = rates[[(start + k) % HOURS for k in range(length)]]
        workload = period_workload(spec, start, end, day.period_s)
        entry: dict[str, Any] = {
            "start_hour": start,
            "end_hour": end,
            "rate_rps": float(period_rates.max()),
            "folder": f"periods/{start:02d}-{end:02d}",
        }
        if workload is None:  # no traffic: the smallest fleet of the first candidate
            entry.update(candidate=prepared.candidates[0], replicas=1, usd_per_hour=None)
            chosen.append(entry)
            continue
        period_plan = plan.model_copy(
            update={"day": DayPlanConfig(), "output_dir": str(folder / entry["folder"])}
        )
        sub = Prepared(
            period_plan,
            [*prepared.base, *workload_overrides(cfg["workload"], workload)],
            prepared.seed,
            prepared.candidates,
            folder / entry["folder"],
            spares=prepared.spares,
        )
        answers = [c for c in plan_candidates(sub, launch, progress)["candidates"] if c["feasible"]]
        if not answers:
            raise ConfigError(
                "plan.day.periods",
                f"{start:02d}-{end:02d} h",
                f"no candidate meets plan.slo at {entry['rate_rps']:.3g} req/s within "
                f"plan.max_replicas ({plan.max_replicas}); see {entry['folder']}/plan.json",
            )
        cheapest = min(c["usd_per_hour"] for c in answers)
        # every answer at the cheapest price (ties are settled once the peak is known)
        entry["tied"] = [c for c in answers if c["usd_per_hour"] <= cheapest * (1 + 1e-9)]
        entry.update(usd_per_hour=cheapest)
        chosen.append(entry)
    peak = _settle(chosen)
    # the day's answers simulated as the periods were: without faults where spares stand in
    runs = _answer_overrides(without_faults(prepared), spec, chosen, peak, prepared, settings, day)
    # the three days, as jobs of the plan's launcher, each into its own run folder
    jobs = [
        Job((*overrides, f"output_dir={folder / 'answers' / name}"))
        for name, overrides in runs.items()
    ]
    results = dict(zip(runs, (_summary(r) for r in launch(jobs)), strict=True))
    out = _day_json(spec, rates, chosen, peak, runs, results, folder, plan)
    out["command"] = _command(prepared)
    out["plan_slo"] = list(plan.slo)
    tmp = folder / f".{DAY_PLAN_FILE}.partial"
    tmp.write_text(json.dumps(out, indent=1) + "\n")
    tmp.replace(folder / DAY_PLAN_FILE)
    return out


def _settle(chosen: list[dict[str, Any]]) -> dict[str, Any]:
    """Each period's answer among its cheapest, and the peak: the period whose answer costs
    most (the demand peak, which longer requests may put off the rate's peak; the higher rate
    on a tie). A period whose cheapest answers tie takes the peak's candidate when it is among
    them, else the first: no engine switch for nothing."""
    planned = [e for e in chosen if e["usd_per_hour"] is not None]
    peak = max(planned, key=lambda e: (e["usd_per_hour"], e["rate_rps"]))
    peak_candidate = peak["tied"][0]["overrides"]
    for entry in planned:
        tied = entry.pop("tied")
        best = next((c for c in tied if c["overrides"] == peak_candidate), tied[0])
        entry.update(candidate=best["overrides"], replicas=best["replicas"])
        if "load_replicas" in best:  # faults on: N for the load, k spares
            entry.update(load_replicas=best["load_replicas"], spare_replicas=best["spare_replicas"])
            # (k from the rates, plan.faults.availability: its tier mix; a k simulated with
            # faults on has no spares block)
            if best.get("spares", {}).get("spares") is not None:
                entry.update(
                    by_tier=best["spares"]["by_tier"],
                    replica_usd_per_hour=best["spares"]["replica_usd_per_hour"],
                    replica_up_probability=best["spares"]["replica_up_probability"],
                )
    return peak


def _answer_overrides(
    base: list[str],
    spec: Any,
    chosen: list[dict[str, Any]],
    peak: dict[str, Any],
    prepared: Prepared,
    settings: list[dict[str, Any]],
    day: DayPlanConfig,
) -> dict[str, list[str]]:
    """Each answer's day simulation, as overrides of the base."""
    quiet = ["sim.progress=false", f"seed={prepared.seed}"]
    runs = {"peak": [*base, *peak["candidate"], f"fleet.replicas={peak['replicas']}", *quiet]}
    # seasonal: the schedule, in simulated seconds from the workload's start hour
    names = {}
    engines: dict[str, dict[str, Any]] = {}
    for candidate, setting in zip(prepared.candidates, settings, strict=True):
        name = "base" if not candidate else f"e{len(engines)}"
        names[json.dumps(candidate)] = name
        if candidate:
            engines[name] = setting
    # the fleet of each hour of day, changed where the period changes (a period wrapping past
    # midnight, or the one the workload starts in, may come back later in the simulated day)
    period_of = {}
    for entry in chosen:
        length = period_length(entry["start_hour"], entry["end_hour"])
        for k in range(length):
            period_of[(entry["start_hour"] + k) % HOURS] = entry
    hour_s = 3600.0 / spec.time_compression
    first = math.floor(spec.start_hour)
    schedule: list[dict[str, Any]] = []
    for k in range(HOURS):
        entry = period_of[(first + k) % HOURS]
        fleet = {"replicas": entry["replicas"], "engine": names[json.dumps(entry["candidate"])]}
        if schedule and {key: schedule[-1][key] for key in fleet} == fleet:
            continue  # the same fleet goes on
        at_s = 0.0 if k == 0 else (first + k - spec.start_hour) * hour_s
        schedule.append({"at_s": at_s, **fleet})
    own: list[str] = []  # the run's own configuration, when the schedule uses one engine
    used = {entry["engine"] for entry in schedule}
    if len(used) == 1 and used != {"base"}:
        # one configuration all day: it is the run's own (its config.yaml then says what ran)
        (name,) = used
        own = next(c for c in prepared.candidates if names[json.dumps(c)] == name)
        schedule = [{**entry, "engine": "base"} for entry in schedule]
        engines = {}
    runs["seasonal"] = [
        *base,
        *own,
        f"fleet.replicas={schedule[0]['replicas']}",
        "autoscale.policy=schedule",
        "autoscale.schedule=" + json.dumps(schedule).replace('"', ""),
        *(["+autoscale.engines=" + json.dumps(engines).replace('"', "")] if engines else []),
        *quiet,
    ]
    # autoscaled: the peak candidate under a metric policy; by default a request-rate scaler
    # whose target is the highest rate per replica a period's answer was verified to carry
    given = dict(day.autoscale)
    given.setdefault("policy", "rate")
    if "target" not in given and given["policy"] == "rate":
        # over the periods the peak's candidate answered: what it was verified to carry
        given["target"] = max(
            e["rate_rps"] / e.get("load_replicas", e["replicas"])  # (spares carry none)
            for e in chosen
            if e["usd_per_hour"] is not None and e["candidate"] == peak["candidate"]
        )
    start = next(e for e in schedule if e["at_s"] == 0)["replicas"]
    runs["autoscaled"] = [
        *base,
        *peak["candidate"],
        f"fleet.replicas={min(start, peak['replicas'])}",
        f"autoscale.max_replicas={max(prepared.plan.max_replicas, peak['replicas'])}",
        *(f"autoscale.{k}={v}" for k, v in given.items()),
        *quiet,
    ]
    return runs


def _summary(result: dict[str, Any]) -> dict[str, Any]:
    if "error" in result:
        raise ConfigError("plan.day", "a day's simulation", result["error"])
    return result["summary"]


def _day_json(
    spec: Any,
    rates: np.ndarray,
    chosen: list[dict[str, Any]],
    peak: dict[str, Any],
    runs: dict[str, list[str]],
    results: dict[str, dict[str, Any]],
    folder: Path,
    plan: PlanConfig,
) -> dict[str, Any]:
    answers = {}
    for name, summary in results.items():
        auto = summary.get("autoscale")
        usd_per_hour = summary["cost"]["usd_per_hour"]
        gpus = auto["gpu_hours"] * 3600 / summary["duration_s"] if auto else summary["num_gpus"]
        answers[name] = {
            "run": f"answers/{name}",
            "overrides": runs[name],
            "usd_per_day": usd_per_hour * HOURS,
            "gpu_hours": gpus * HOURS,
            "replicas_max": auto["replicas_max"] if auto else summary["num_replicas"],
            "ttft_p99_s": summary["ttft_s"]["p99"],
            "tpot_p99_s": summary["tpot_s"]["p99"],
            **hourly_attainment(
                folder / "answers" / name, spec.start_hour, spec.time_compression, plan.slo
            ),
        }
    note = None
    if answers["seasonal"]["usd_per_day"] > answers["peak"]["usd_per_day"] * (1 + 1e-9):
        # switching (both fleets during a changeover, provisioning ahead) cost more than the
        # smaller fleets saved: a planner keeps the peak fleet
        note = "switching cost more than it saved: the seasonal answer keeps the peak fleet"
        answers["seasonal"] = {**answers["peak"], "note": note}
    peak_cost = answers["peak"]["usd_per_day"]
    tiered = tiered_day_bill(chosen, peak, plan.faults)
    return {
        "periods": [
            {
                k: p[k]
                for k in (
                    "start_hour",
                    "end_hour",
                    "rate_rps",
                    "candidate",
                    "replicas",
                    "load_replicas",
                    "spare_replicas",
                    "usd_per_hour",
                    "by_tier",
                    "folder",
                )
                if k in p
            }
            for p in chosen
        ],
        "peak_period": [peak["start_hour"], peak["end_hour"]],
        "hourly_rates_rps": [float(r) for r in rates],
        "start_hour": spec.start_hour,
        "time_compression": spec.time_compression,
        "answers": answers,
        "saving_vs_peak": {
            name: 1.0 - answers[name]["usd_per_day"] / peak_cost if peak_cost else None
            for name in ("seasonal", "autoscaled")
        },
        "note": note,
        **({"tiered_bill": tiered} if tiered else {}),
    }


def _command(prepared: Prepared) -> str:
    """The ``fleetcast plan`` command of this plan: its base overrides and every ``plan.*``
    setting that is not the default."""
    default = load_plan([])[0].model_dump()
    settings = []
    for key, value in prepared.plan.model_dump().items():
        if key in ("day", "faults"):  # (one setting at a time: Hydra reads bare keys)
            settings += [
                f"plan.{key}.{k}={json.dumps(v)}" for k, v in value.items() if v != default[key][k]
            ]
        elif value != default[key] and key != "output_dir":
            settings.append(f"plan.{key}={json.dumps(value)}")
    words = ["fleetcast", "plan", *prepared.base, *settings]
    return " ".join(shlex.quote(w) for w in words)


def day_table(out: dict[str, Any]) -> str:
    """The three answers side by side, as the command prints them."""
    lines = [
        "SLO met: the share of requests within every slo.* bound; hours plan.slo held: the hours "
        f"whose requests met {', '.join(out.get('plan_slo') or []) or 'plan.slo'}",
        "periods:",
    ]
    for p in out["periods"]:
        cost = "-" if p["usd_per_hour"] is None else f"${p['usd_per_hour']:,.2f}/h"
        spare = p.get("spare_replicas")
        split = f" (N = {p['load_replicas']} + k = {spare})" if spare is not None else ""
        lines.append(
            f"  {p['start_hour']:02d}-{p['end_hour']:02d} h  peak {p['rate_rps']:.3g} req/s: "
            f"{p['replicas']} x {' '.join(p['candidate']) or 'base'}{split}  {cost}"
        )
    lines.append(
        f"{'answer':<12}{'$/day':>12}{'GPU-h/day':>11}{'max repl.':>10}"
        f"{'SLO met':>9}{'worst hour':>12}{'vs peak':>9}  hours plan.slo held"
    )
    for name in ANSWERS:
        a = out["answers"][name]
        worst = min((h for h in a["hourly"] if h["requests"]), key=lambda h: h["attainment"])
        saving = out["saving_vs_peak"].get(name)
        lines.append(
            f"{name:<12}{a['usd_per_day']:>12,.0f}{a['gpu_hours']:>11,.1f}{a['replicas_max']:>10}"
            f"{a['slo_attainment']:>9.2%}{worst['attainment']:>7.1%} {worst['hour']:02d}h"
            + (f"{0.0 - saving + 0.0:>+9.1%}" if saving is not None else f"{'':>9}")
            + f"  {a['hours_plan_slo_met']} of {a['hours_with_requests']}"
        )
    if out.get("note"):
        lines.append(out["note"])
    bill = out.get("tiered_bill")
    if bill:
        lines.append(tiered_bill_text(bill, out["periods"]))
    return "\n".join(lines)
