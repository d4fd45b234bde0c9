"""``fleetcast report PATH [--out FILE_STEM] [--title TEXT]``: a run, sweep, plan or day-plan
folder as ``PATH/report.html`` (self-contained) and ``PATH/report.md`` with its figures in
``PATH/report_files/`` (``--out STEM``: ``STEM.html``, ``STEM.md``, ``STEM_files/``).

Each report has the same order: the answer in one paragraph, the figures the input supports,
the tables behind them, and the assumptions. What each kind of folder shows:

- a run: its workload; KV cache and running requests; the fleet over time
  (``scaling.parquet``); with faults, its replicas up, draining and down with the faults
  marked, and their table by kind (``faults.parquet``); and its latency table;
- a sweep: latency against load; cost per point; the chosen run's workload (and KV cache
  while its folder is there), and the table of points; costs ranked within each traffic
  (``sim.report.answer.traffic_groups``), each traffic headed by its settings;
- a plan: latency against load with the knee and the operating point; cost per candidate,
  and the table of candidates; the chosen run's ``faults`` block, when it had faults; a
  capacity plan (``plan.solve=max_rate``): each SLO statistic against load with its bound and
  the capacity found, and the rate multiples tried;
- a day plan: the replicas and $/hour of each answer over the day; hourly SLO attainment; the
  chosen answer's workload and KV cache, and the tables of answers and periods.

A plan's simulations keep only their summaries, so a plan has no workload or KV figure. Bad
input (PATH missing, not one of these folders, a run that did not finish) ends with one line,
``error: PATH=...: reason``, and exit status 2, before anything is written; so does a missing
``report`` extra.
"""

from __future__ import annotations

import argparse
import importlib.util
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from sim.errors import ConfigError
from sim.output.summary_table import _num
from sim.report.document import Document, Heading, Paragraph, Table, write_report
from sim.report.plotting import REPORT_EXTRA

if TYPE_CHECKING:
    import pandas as pd

    from sim.report.inputs import DayPlanInput, PlanInput, ReportInput, RunInput, SweepInput


def latency_table(summary: dict) -> Table:
    rows = []
    for label, key in (
        ("TTFT", "ttft_s"),
        ("TPOT (vLLM)", "tpot_s"),
        ("ITL (LLMPerf, e2e/out)", "itl_s"),
        ("E2E", "e2e_s"),
        ("queueing delay", "queueing_delay_s"),
    ):
        stats = summary.get(key) or {}
        rows.append([label, *(_num(stats.get(p)) for p in ("mean", "p50", "p90", "p95", "p99"))])
    return Table(
        ["latency (s)", "mean", "p50", "p90", "p95", "p99"],
        rows,
        "Latency over completed requests (TPOT as vLLM defines it; ITL as LLMPerf does).",
    )


def run_figures(doc: Document, run: RunInput, suffix: str = "") -> None:
    """The figures of one run folder: workload, KV cache, the fleet over time, its faults."""
    # imported here: pandas and seaborn, the report extra (~600 ms of CPU), checked in main
    from sim.report import kv_use, scaling, traffic

    requests = run.requests(traffic.COLUMNS)
    doc.add(
        traffic.workload_figure(requests, f"workload{suffix}") if requests is not None else None
    )
    mode = run.step_mode
    steps = None if mode == "none" else run.steps(kv_use.COLUMNS)
    changes = run.scaling()
    figure = kv_use.kv_figure(
        steps, run.summary, run.config, bucketed=mode == "bucketed", scaling=changes
    )
    if figure is not None:
        doc.add(kv_use.Figure(f"{figure.name}{suffix}", figure.caption, figure.png))
    else:
        why = (
            "the folder has no steps.parquet"
            if steps is None and mode != "none"
            else f"the run kept no step rows (output.steps={mode})"
        )
        doc.add(Paragraph(f"No KV-cache figure: {why}."))
    doc.add(scaling.scaling_figure(changes, run.summary, f"scaling{suffix}"))
    faults_figures(doc, run, requests, suffix)


def faults_figures(
    doc: Document, run: RunInput, requests: pd.DataFrame | None, suffix: str = ""
) -> None:
    """A run with faults (``faults.parquet``): its fleet over time with the faults marked,
    and their table by kind; nothing for a run without."""
    # imported here: pandas and seaborn, the report extra (~600 ms of CPU), checked in main
    from sim.report import faults

    events = run.faults()
    if events is None:
        return
    arrivals = None if requests is None else requests["arrival_time_s"].to_numpy(float)
    start_s, end_s = faults.run_span(arrivals, run.summary)
    # the events that began within the run, as the summary counts them
    events = events[events["start_s"] <= end_s]
    doc.add(Heading("Faults", level=3))
    if len(events) == 0:
        doc.add(Paragraph("Faults were on, and none came within the run."))
        return
    doc.add(
        faults.faults_figure(events, run.summary, start_s, end_s, f"faults{suffix}"),
        faults.kinds_table(events, start_s, end_s),
    )


def assumptions_section(
    doc: Document,
    run: RunInput | None,
    produced_by: str | None,
    report_command: str,
    version: str | None = None,
    whose: str = "",
) -> None:
    """The assumptions of ``run``'s config (``whose`` says which run it is), or why its
    config is unknown."""
    # imported here: pandas and seaborn, the report extra (~600 ms of CPU), checked in main
    from sim.report.assumptions import assumptions_table

    doc.add(Heading("Assumptions"))
    if run is None:
        doc.add(
            Paragraph(
                f"The run folder{whose} is not there: its config is unknown. The inputs were "
                f"produced by: {produced_by or 'not recorded'}."
            )
        )
        return
    doc.add(
        assumptions_table(
            run.config,
            run.summary,
            produced_by,
            report_command,
            version,
            f": the config of the run{whose}",
        )
    )


def run_document(doc: Document, run: RunInput, report_command: str) -> None:
    # imported here: pandas and seaborn, the report extra (~600 ms of CPU), checked in main
    from sim.report.answer import run_answer

    doc.add(Heading("Answer"), Paragraph(run_answer(run), answer=True), Heading("Figures"))
    run_figures(doc, run)
    doc.add(Heading("Latency"), latency_table(run.summary))
    assumptions_section(doc, run, run.command, report_command, whose=f" {run.path.name}")


def capacity_document(doc: Document, plan: PlanInput, report_command: str) -> None:
    """A capacity plan (``plan.solve=max_rate``): the capacity, each SLO statistic against
    load, the multiples tried, and the assumptions of the run at the capacity."""
    # imported here: pandas and seaborn, the report extra (~600 ms of CPU), checked in main
    from sim.report.capacity import capacity_answer, capacity_figure, evaluated_table

    c = plan.plan["capacity"]
    replicas = int(plan.plan.get("replicas") or 1)
    at = c.get("rate_x") or c.get("misses_at_rate_x")
    chosen = plan.run([f"sim.arrival_rate_scale={at:g}"], replicas) if at else None
    doc.add(
        Heading("Answer"),
        Paragraph(capacity_answer(plan.plan), answer=True),
        Heading("Figures"),
        capacity_figure(plan.rows, plan.plan),
        Paragraph(
            "The plan's simulations keep only their summaries (no requests or steps), so it "
            "has no workload or KV-cache figure: report one of its runs for those."
        ),
        Heading("Rates tried"),
        evaluated_table(plan.plan),
    )
    whose = f" at x{at:g} the rate" if at else ""
    assumptions_section(doc, chosen, plan.command, report_command, plan.version, whose)


def plan_document(doc: Document, plan: PlanInput, report_command: str) -> None:
    # imported here: pandas and seaborn, the report extra (~600 ms of CPU), checked in main
    from sim.report.answer import plan_answer, ranked
    from sim.report.capacity import is_capacity

    if is_capacity(plan.plan):
        capacity_document(doc, plan, report_command)
        return
    from sim.report.costs import PLAN_NOTE, cost_figure, cost_table, plan_costs
    from sim.report.inputs import searched_replicas
    from sim.report.load import load_figure, plan_curves

    feasible = ranked(plan.candidates)
    best = feasible[0] if feasible else None
    searched = searched_replicas(best) if best else None
    chosen = plan.run(best["overrides"], searched) if best and searched else None
    costs = plan_costs(plan.plan, plan.rows)
    doc.add(
        Heading("Answer"),
        Paragraph(plan_answer(plan, chosen), answer=True),
        Heading("Figures"),
        load_figure(plan_curves(plan.rows, plan.plan)),
        cost_figure(costs),
        Paragraph(
            "The plan's simulations keep only their summaries (no requests or steps), so it "
            "has no workload or KV-cache figure: report one of its runs for those."
        ),
        Heading("Candidates"),
        cost_table(costs, PLAN_NOTE),
    )
    infeasible = [
        f"{c['candidate']}: {c.get('reason')}" for c in plan.candidates if not c.get("feasible")
    ]
    if infeasible:
        doc.add(Paragraph(f"Infeasible: {'; '.join(infeasible)}."))
    if chosen is not None and chosen.summary.get("faults") is not None:
        # imported here: pandas, the report extra, checked in main
        from sim.report.faults import block_table

        whose = f"{whose_best(best)} (its first replication)"
        doc.add(Heading("Faults"), block_table(chosen.summary, whose))
    if plan.day_plan is not None:
        doc.add(
            Paragraph(
                f"This plan is the period {plan.path.resolve().name} of the day plan in "
                f"{plan.day_plan}: its simulations are in that folder's runs/, and the command "
                "that produced it is the day plan's."
            )
        )
    assumptions_section(doc, chosen, plan.command, report_command, plan.version, whose_best(best))


def whose_best(best: dict | None) -> str:
    """`` of CANDIDATE at N replica(s)``: which run of a plan is its answer's."""
    return f" of {best['candidate']} at {best['replicas']} replica(s)" if best else ""


def sweep_document(doc: Document, sweep: SweepInput, report_command: str) -> None:
    """A run is ranked only against the runs at its traffic: a sweep over the traffic gets an
    answer, a cost figure and a table per traffic, each headed by it."""
    # imported here: pandas and seaborn, the report extra (~600 ms of CPU), checked in main
    from sim.report import traffic
    from sim.report.answer import (
        MIN_SLO_ATTAINMENT,
        attainment_by_run,
        sweep_answer,
        sweep_choices,
        traffic_groups,
    )
    from sim.report.costs import SWEEP_NOTE, by_traffic, cost_figure, cost_table, sweep_costs
    from sim.report.load import load_figure, sweep_curves

    runs = sweep.runs
    attained = attainment_by_run(runs)
    groups = traffic_groups(runs, sweep.swept_keys)
    choices = sweep_choices(runs, attained, groups)
    chosen = [c for c in choices.values() if c is not None]
    costs = by_traffic(sweep_costs(runs, sweep.swept_keys, attained, MIN_SLO_ATTAINMENT, groups))
    several = len(costs) > 1
    doc.add(
        Heading("Answer"),
        Paragraph(sweep_answer(sweep, attained, choices), answer=True),
        Heading("Figures"),
        load_figure(sweep_curves(runs, sweep.swept_keys, chosen)),
    )
    for i, (name, mine) in enumerate(costs.items(), 1):
        doc.add(
            Heading(f"Traffic {name}", level=3) if several else None,
            cost_figure(mine, f"cost_{i}" if several else "cost"),
        )
    answered = [(name, c) for name, c in choices.items() if c is not None]
    shown = answered[0][1] if answered else (runs["run_id"].iloc[0] if len(runs) else None)
    run = sweep.run(shown) if shown is not None else None
    if run is not None:
        which = (
            "its first run (none keeps SLO attainment)"
            if not answered
            else f"the answer at {answered[0][0]}"
            if several
            else "the sweep's answer"
        )
        doc.add(Paragraph(f"Run {shown}, {which}:"))
        run_figures(doc, run)
    elif shown is not None:
        doc.add(Paragraph(f"Run {shown}'s requests, from the collected dataset:"))
        doc.add(traffic.workload_figure(sweep.requests(shown, traffic.COLUMNS)))
    doc.add(Heading("Points"))
    for name, mine in costs.items():
        doc.add(
            Heading(f"Traffic {name}", level=3) if several else None,
            cost_table(mine, SWEEP_NOTE),
        )
    assumptions_section(doc, run, sweep.command, report_command, sweep.version, f" {shown}")


def day_document(doc: Document, day: DayPlanInput, report_command: str) -> None:
    # imported here: pandas and seaborn, the report extra (~600 ms of CPU), checked in main
    from sim.report import scaling
    from sim.report.answer import day_answer, day_choice

    plan = day.plan
    scalings = {}
    for name, answer_run in day.runs.items():
        table = answer_run.scaling()
        if table is None or len(table) == 0:  # the peak fleet never changes
            table = scaling.fixed_fleet(answer_run.summary)
        if table is not None:
            scalings[name] = (table, scaling.run_end_s(table, answer_run.summary))
    doc.add(
        Heading("Answer"),
        Paragraph(day_answer(day), answer=True),
        Heading("Figures"),
        scaling.day_fleet_figure(plan, scalings),
        scaling.hourly_attainment_figure(plan),
    )
    best = day_choice(plan.answers)
    run = day.runs.get(best.name) if best is not None else None
    if run is not None and best is not None:
        doc.add(Paragraph(f"The {best.name} answer's run ({run.path.name}):"))
        run_figures(doc, run, f"_{best.name}")
    doc.add(Heading("Answers"), scaling.day_answers_table(plan), scaling.periods_table(plan))
    if day.missing:
        missing = "; ".join(f"{k}: {v}" for k, v in day.missing.items())
        doc.add(Paragraph(f"Not shown: {missing}."))
    whose = f" of the {best.name} answer" if best is not None else ""
    assumptions_section(doc, run, day.command, report_command, None, whose)


def build_document(source: ReportInput, title: str, report_command: str) -> Document:
    """The report of ``source``, its sections in the module docstring's order."""
    # imported here: pandas and seaborn, the report extra (~600 ms of CPU), checked in main
    from sim.report.inputs import DayPlanInput, PlanInput, RunInput

    doc = Document(title)
    if isinstance(source, RunInput):
        run_document(doc, source, report_command)
    elif isinstance(source, PlanInput):
        plan_document(doc, source, report_command)
    elif isinstance(source, DayPlanInput):
        day_document(doc, source, report_command)
    else:
        sweep_document(doc, source, report_command)
    return doc


KINDS = {"RunInput": "run", "SweepInput": "sweep", "PlanInput": "plan", "DayPlanInput": "day plan"}


def parser() -> argparse.ArgumentParser:
    made = argparse.ArgumentParser(
        prog="fleetcast report",
        description="A run, sweep, plan or day-plan folder as a self-contained HTML report and "
        "a Markdown one with its figures as PNG files.",
    )
    made.add_argument(
        "path", metavar="PATH", help="a run, collected sweep, plan or day-plan folder"
    )
    made.add_argument(
        "--out",
        metavar="FILE_STEM",
        default=None,
        help="write FILE_STEM.html, FILE_STEM.md and FILE_STEM_files/ (default: PATH/report)",
    )
    made.add_argument("--title", default=None, help="the report's title")
    return made


def writable_folder(folder: Path, given: str) -> None:
    """A ConfigError on ``--out`` unless ``folder`` is, or can be made as, a folder we may
    write in: checked before anything is read, so a report is not built to be thrown away."""
    import os

    there = folder
    while not there.exists() and there != there.parent:
        there = there.parent  # the nearest part of the path that exists
    if not there.is_dir():
        raise ConfigError("--out", given, f"{there} is a file, not a folder")
    if not os.access(there, os.W_OK | os.X_OK):
        raise ConfigError("--out", given, f"cannot write in {there} (permission denied)")


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    missing = [name for name in REPORT_EXTRA if importlib.util.find_spec(name) is None]
    if missing:
        print(
            f"error: fleetcast report needs {missing[0]}: pip install 'fleetcast[report]'",
            file=sys.stderr,
        )
        return 2
    # imported here: pandas and seaborn, the report extra (~600 ms of CPU), checked in main
    from sim.report.inputs import read_input

    report_command = shlex.join(["fleetcast", "report", *argv])
    try:
        if args.out:
            writable_folder(Path(args.out).expanduser().parent, args.out)
        source = read_input(args.path)
        kind = KINDS[type(source).__name__]
        title = args.title or f"Fleetcast report: {kind} {Path(args.path).resolve().name}"
        doc = build_document(source, title, report_command)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    stem = Path(args.out).expanduser() if args.out else Path(args.path).expanduser() / "report"
    try:
        page, markdown = write_report(doc, stem)
    except OSError as err:  # --out under a file, in a folder we may not write, a full disk
        field = "--out" if args.out else "PATH"
        reason = " ".join(str(err).split())
        print(
            f"error: {ConfigError(field, str(stem), f'cannot write the report: {reason}')}",
            file=sys.stderr,
        )
        return 2
    print(f"report: {page}")
    print(f"        {markdown} (figures in {stem.name}_files/)")
    return 0
