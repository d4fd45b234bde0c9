"""What ``fleetcast report PATH`` reads: which kind of folder PATH is, and its files.

PATH is one of (the first that matches):

- a day plan: ``day_plan.json`` and its answers' run folders (``sim.report.day_plan``);
- a plan: ``plan.json``, ``plan.parquet`` and ``runs/KEY/`` (``fleetcast plan``), with
  ``plan_request.json`` when the command wrote one. A day plan's period
  (``DAYPLAN/periods/START-END/``) is a plan whose simulations live in the day plan's
  ``runs/`` and whose command is the day plan's: both are looked for two levels up;
- a run: ``summary.json``, ``config.yaml``, ``requests.parquet``, ``steps.parquet`` and, for a
  fleet that scaled, ``scaling.parquet``, for one with faults, ``faults.parquet``; a folder
  with ``config.yaml`` but no ``summary.json`` is a run that did not finish, and is refused;
- a collected sweep: ``SWEEP/collected/runs.parquet`` (``fleetcast collect SWEEP``), given as
  ``SWEEP`` or ``SWEEP/collected``; its run folders are read too while they are there.

Anything else is refused with one line naming PATH (``ConfigError`` on the field ``PATH``).
Tables are read when a section asks for them, and only the columns it needs; one that cannot be
read (a truncated Parquet file) is refused the same way, naming the file.

The JSON and YAML files are checked for the shape the report reads before any of it is used
(``SUMMARY_SHAPE``, ``CONFIG_SECTIONS``, ``PLAN_SHAPE``, ``PLAN_REQUEST_SHAPE``): a key of the
wrong type (text where a number belongs, a list where a mapping does) is a one-line refusal
naming the file and the key, not a traceback from deep inside a figure. Keys the report does
not know are left alone, so a newer Fleetcast's extra keys still report. A run that completed no
request is refused too: every section of a run's report (its answer, latency, cost per token,
KV-cache figure) is computed over completed requests, and a page of dashes would look like a
broken report rather than say what happened.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from sim.output.run_files import (
    CONFIG_FILE,
    FAULTS_FILE,
    REQUESTS_FILE,
    SCALING_FILE,
    STEPS_FILE,
    SUMMARY_FILE,
)
from sim.plan.rounds import Rounds
from sim.plan.runs import RUNS_FOLDER, Job, Simulations
from sim.report.day_plan import DAY_PLAN_FILE, DayPlan, read_day_plan
from sim.report.shapes import (
    CONFIG_SECTIONS,
    MAPPING,
    PLAN_REQUEST_SHAPE,
    PLAN_SHAPE,
    SUMMARY_KEYS,
    SUMMARY_SHAPE,
    TEXT,
    check_shape,
    refuse,
)
from sim.resources import config_file, yaml_loader

COLLECTED_FOLDER = "collected"
RUNS_TABLE = "runs.parquet"
PLAN_FILE = "plan.json"
PLAN_TABLE = "plan.parquet"
PLAN_REQUEST_FILE = "plan_request.json"
MULTIRUN_FILE = "multirun.yaml"  # Hydra's record of a sweep's command


def _read_json(path: Path, folder: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise refuse(folder, f"cannot read {path.name}: {' '.join(str(err).split())}") from None


def _read_yaml(path: Path, folder: Path) -> Any:
    try:
        return yaml.load(path.read_text(), Loader=yaml_loader())
    except (OSError, yaml.YAMLError) as err:
        raise refuse(folder, f"cannot read {path.name}: {' '.join(str(err).split())}") from None


def _parquet(path: Path, columns: list[str] | None = None) -> pd.DataFrame | None:
    """The table at ``path`` (only ``columns`` it has, when given); None when absent; a
    ConfigError naming the file (and its folder as PATH) when it cannot be read."""
    if not path.exists():
        return None
    try:
        if columns is not None:
            have = set(pq.read_schema(path).names) if path.is_file() else None
            columns = [c for c in columns if have is None or c in have]
        return pq.read_table(path, columns=columns).to_pandas()
    except (pa.ArrowException, OSError) as err:
        raise refuse(
            path.parent, f"cannot read {path.name}: {' '.join(str(err).split())}"
        ) from None


@dataclass
class RunInput:
    """A finished run's folder."""

    path: Path
    config: dict[str, Any]
    summary: dict[str, Any]
    overrides: list[str] | None  # the command's overrides (.hydra/overrides.yaml), if kept

    def requests(self, columns: list[str] | None = None) -> pd.DataFrame | None:
        return _parquet(self.path / REQUESTS_FILE, columns)

    def steps(self, columns: list[str] | None = None) -> pd.DataFrame | None:
        return _parquet(self.path / STEPS_FILE, columns)

    def scaling(self) -> pd.DataFrame | None:
        return _parquet(self.path / SCALING_FILE)

    def faults(self) -> pd.DataFrame | None:
        """``faults.parquet``: the run's fault events, when it had faults on."""
        return _parquet(self.path / FAULTS_FILE)

    @property
    def command(self) -> str | None:
        """The command that wrote the run, from its recorded overrides."""
        return None if self.overrides is None else shlex.join(["fleetcast", *self.overrides])

    @property
    def step_mode(self) -> str:
        """``output.steps``: full, bucketed or none."""
        return str((self.config.get("output") or {}).get("steps") or "full")


def read_run(folder: Path) -> RunInput:
    """The run in ``folder``; ConfigError when it has no summary (not finished), or when its
    summary or config is not of the shape the report reads (``SUMMARY_SHAPE``)."""
    if not (folder / SUMMARY_FILE).is_file():
        raise refuse(folder, f"no {SUMMARY_FILE}: not a finished run (it failed or is running)")
    summary = _read_json(folder / SUMMARY_FILE, folder)
    config = _read_yaml(folder / CONFIG_FILE, folder) if (folder / CONFIG_FILE).is_file() else {}
    recorded = folder / ".hydra" / "overrides.yaml"
    overrides = _read_yaml(recorded, folder) if recorded.is_file() else None
    if not isinstance(summary, dict) or not isinstance(config, dict):
        raise refuse(folder, f"{SUMMARY_FILE} and {CONFIG_FILE} must hold mappings")
    missing = [key for key in SUMMARY_KEYS if key not in summary]
    if missing:
        raise refuse(
            folder,
            f"{SUMMARY_FILE} has no {', '.join(missing)}: not a summary Fleetcast wrote",
        )
    check_shape(summary, SUMMARY_SHAPE, SUMMARY_FILE, folder)
    check_shape(config, dict.fromkeys(CONFIG_SECTIONS, MAPPING), CONFIG_FILE, folder)
    return RunInput(
        folder,
        config,
        summary,
        [str(o) for o in overrides] if isinstance(overrides, list) else None,
    )


def require_served(run: RunInput) -> None:
    """A ConfigError unless the run completed at least one request (see the module
    docstring: its report would have nothing to show)."""
    summary = run.summary
    if not summary["completed"]:
        raise refuse(
            run.path,
            f"the run completed no request ({summary.get('num_requests', 0):,} measured: "
            f"{summary['rejected']:,} rejected, {summary['unfinished']:,} unfinished), so there "
            "is no latency, throughput or cost per token to report; its printed summary (or "
            f"{SUMMARY_FILE}) says what it did",
        )


@dataclass
class SweepInput:
    """A collected sweep: ``runs.parquet`` (one row per run) and, where they still are, the
    run folders and their requests."""

    path: Path  # the collected folder
    runs: pd.DataFrame
    swept_keys: list[str]
    version: str | None  # the Fleetcast that collected it
    sweep_dir: Path | None  # the folder of the run folders, when collected/ sits in it
    overrides: list[str] | None  # the sweep's command (multirun.yaml), when recorded

    @property
    def command(self) -> str | None:
        """The sweep's command, from Hydra's record of it."""
        return None if self.overrides is None else shlex.join(["fleetcast", "-m", *self.overrides])

    def run(self, run_id: object) -> RunInput | None:
        """The run folder of ``run_id``, if it is still there."""
        if self.sweep_dir is None or not (self.sweep_dir / str(run_id) / SUMMARY_FILE).is_file():
            return None
        return read_run(self.sweep_dir / str(run_id))

    def requests(self, run_id: object, columns: list[str] | None = None) -> pd.DataFrame | None:
        """``run_id``'s requests from the collected dataset."""
        part = self.path / "requests" / f"run_id={run_id}"
        return _parquet(part, columns) if part.is_dir() else None


def varying(runs: pd.DataFrame, swept: list[str], leave_out: set[str]) -> list[str]:
    """The swept keys whose value differs between runs, but those in ``leave_out``."""
    return [k for k in swept if k in runs and k not in leave_out and runs[k].nunique() > 1]


def run_labels(runs: pd.DataFrame, swept: list[str], leave_out: set[str]) -> pd.Series:
    """Each run's ``key=value, ...`` of the ``varying`` keys (``all runs`` when none)."""
    keys = varying(runs, swept, leave_out)
    if not keys:
        return pd.Series("all runs", index=runs.index)
    return (
        runs[keys]
        .astype(str)
        .apply(lambda row: ", ".join(f"{k}={v}" for k, v in row.items()), axis=1)
    )


def read_sweep(collected: Path) -> SweepInput:
    try:
        table = pq.read_table(collected / RUNS_TABLE)
        meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
        swept = json.loads(meta.get("fleetcast_swept_keys", "[]"))
    except (pa.ArrowException, OSError, ValueError) as err:
        reason = " ".join(str(err).split())
        raise refuse(collected, f"cannot read {RUNS_TABLE}: {reason}") from None
    check_shape(swept, [TEXT], f"{RUNS_TABLE}'s metadata", collected, "fleetcast_swept_keys")
    sweep_dir = collected.parent if collected.name == COLLECTED_FOLDER else None
    overrides = None
    if sweep_dir is not None and (sweep_dir / MULTIRUN_FILE).is_file():
        recorded = _read_yaml(sweep_dir / MULTIRUN_FILE, sweep_dir)
        task = (((recorded or {}).get("hydra") or {}).get("overrides") or {}).get("task")
        overrides = [str(o) for o in task] if isinstance(task, list) else None
    return SweepInput(
        collected,
        table.to_pandas(),
        [str(k) for k in swept],
        meta.get("fleetcast_version"),
        sweep_dir,
        overrides,
    )


def _hydra_value(value: Any) -> str:
    """A value as an override writes it (``{hardware: [h100_sxm, h200]}``, ``null``)."""
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_hydra_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_hydra_value(v) for v in value) + "]"
    return str(value)


def plan_command(request: dict[str, Any]) -> str:
    """``fleetcast plan`` from ``plan_request.json``: the base overrides, then each plan setting
    that differs from the shipped default (``configs/plan/default.yaml``), ``plan.day.*`` and
    ``plan.faults.*`` one by one."""
    defaults = config_file("plan/default.yaml")
    settings = request.get("plan") or {}
    nested = ("day", "faults")  # (groups of settings, each said on its own)
    given = {k: v for k, v in settings.items() if k not in nested}
    usual = {k: v for k, v in defaults.items() if k not in nested}
    for group in nested:
        given.update({f"{group}.{k}": v for k, v in (settings.get(group) or {}).items()})
        usual.update({f"{group}.{k}": v for k, v in (defaults.get(group) or {}).items()})
    words = [str(o) for o in request.get("base") or []]
    for key, value in given.items():
        if key not in usual or usual[key] != value:
            words.append(f"plan.{key}={_hydra_value(value)}")
    return shlex.join(["fleetcast", "plan", *words])


@dataclass
class PlanInput:
    """A plan's folder: ``plan.json`` (per candidate its answer), ``plan.parquet`` (one row per
    simulation), ``plan_request.json`` when written, and ``runs/KEY/`` (config and summary of
    each simulation).

    A day plan's period (``DAYPLAN/periods/START-END/``) has neither ``runs/`` nor
    ``plan_request.json`` of its own: its simulations are in ``DAYPLAN/runs/`` (shared by the
    periods, so a rerun resumes) and its command is the day plan's (``day_plan``: that
    folder; ``request``: its ``plan_request.json``)."""

    path: Path
    plan: dict[str, Any]
    rows: pd.DataFrame | None
    request: dict[str, Any] | None
    day_plan: Path | None = None  # the day plan this plan is a period of
    day_command: str | None = None  # that day plan's command, from its day_plan.json

    @property
    def candidates(self) -> list[dict[str, Any]]:
        return [c for c in self.plan.get("candidates") or [] if isinstance(c, dict)]

    @property
    def version(self) -> str | None:
        return None if self.request is None else self.request.get("version")

    @property
    def command(self) -> str:
        """``fleetcast plan`` as it was given: from ``plan_request.json`` when written (a
        period's: the day plan's), else the day plan's own record of it, else from
        ``plan.json`` (its SLOs, and its candidates listed one by one: a grid is not recorded
        there)."""
        if self.request is not None:
            return plan_command(self.request)
        if self.day_command is not None:
            return self.day_command
        words = [str(o) for o in self.plan.get("base_overrides") or []]
        words.append(f"plan.slo=[{', '.join(self.plan.get('slo') or [])}]")
        listed = [c.get("overrides") or [] for c in self.candidates]
        if any(listed):
            words.append(f"plan.candidates={_hydra_value(listed)}")
        return shlex.join(["fleetcast", "plan", *words])

    def run(self, overrides: list[str], replicas: int, replication: int = 0) -> RunInput | None:
        """The folder of one simulation, named as the planner names it (in the plan's
        ``runs/``, else in its day plan's); None when it is not there (another Fleetcast
        version names its folders differently)."""
        base = [str(o) for o in self.plan.get("base_overrides") or []]
        seed = int(self.plan.get("seed") or 0)
        job = Job(
            tuple(Simulations(base, seed, Rounds(list)).overrides(overrides, replicas, replication))
        )
        for where in (self.path, self.day_plan):
            if where is not None and (job.folder(where) / SUMMARY_FILE).is_file():
                return read_run(job.folder(where))
        return None


def searched_replicas(candidate: dict[str, Any]) -> int | None:
    """The count a plan answer's simulations ran at: its ``replicas``, or with spares computed
    from the failure rates (``plan.faults.availability``: ``replicas`` is N + k) the load's N,
    ``load_replicas``."""
    if candidate.get("spares") and candidate.get("load_replicas") is not None:
        return int(candidate["load_replicas"])
    return candidate.get("replicas")


PERIODS_FOLDER = "periods"  # a day plan's periods' plan folders (sim.plan.day)


def day_plan_of(folder: Path) -> Path | None:
    """The day plan whose period ``folder`` is (``DAYPLAN/periods/START-END``): the folder two
    levels up, when it holds ``runs/`` and ``day_plan.json`` or ``plan_request.json``."""
    parent = folder.resolve().parent
    if parent.name != PERIODS_FOLDER:
        return None
    day = parent.parent
    marked = (day / DAY_PLAN_FILE).is_file() or (day / PLAN_REQUEST_FILE).is_file()
    return day if marked and (day / RUNS_FOLDER).is_dir() else None


def read_plan(folder: Path) -> PlanInput:
    plan = _read_json(folder / PLAN_FILE, folder)
    if not isinstance(plan, dict):
        raise refuse(folder, f"{PLAN_FILE} must hold a JSON object")
    check_shape(plan, PLAN_SHAPE, PLAN_FILE, folder)
    request = folder / PLAN_REQUEST_FILE
    day = None if request.is_file() else day_plan_of(folder)
    day_command = None
    if day is not None:
        request = day / PLAN_REQUEST_FILE
        if (day / DAY_PLAN_FILE).is_file():
            day_command = read_day_plan(day).command
    recorded = _read_json(request, folder) if request.is_file() else None
    if recorded is not None:
        check_shape(recorded, PLAN_REQUEST_SHAPE, PLAN_REQUEST_FILE, folder)
    return PlanInput(folder, plan, _parquet(folder / PLAN_TABLE), recorded, day, day_command)


@dataclass
class DayPlanInput:
    """A day plan's folder: ``day_plan.json`` and the run folder of each answer found."""

    path: Path
    plan: DayPlan
    runs: dict[str, RunInput] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)  # answer -> why it has no run
    request: dict[str, Any] | None = None  # plan_request.json, when the folder holds one

    @property
    def command(self) -> str | None:
        """The day plan's own record of its command, else the plan request's."""
        if self.plan.command is not None or self.request is None:
            return self.plan.command
        return plan_command(self.request)


def read_day_plan_folder(folder: Path) -> DayPlanInput:
    request = folder / PLAN_REQUEST_FILE
    recorded = _read_json(request, folder) if request.is_file() else None
    if recorded is not None:
        check_shape(recorded, PLAN_REQUEST_SHAPE, PLAN_REQUEST_FILE, folder)
    found = DayPlanInput(folder, read_day_plan(folder), request=recorded)
    for name, answer in found.plan.answers.items():
        if answer.run is None:
            found.missing[name] = "no run folder named"
        elif not (folder / answer.run / SUMMARY_FILE).is_file():
            found.missing[name] = f"{answer.run} holds no finished run"
        else:
            found.runs[name] = read_run(folder / answer.run)
    return found


ReportInput = RunInput | SweepInput | PlanInput | DayPlanInput


def read_input(given: str | Path) -> ReportInput:
    """The folder ``given`` as the kind of input it is; ConfigError when it is none of them."""
    folder = Path(given).expanduser()
    if not folder.exists():
        raise refuse(given, "not found")
    if not folder.is_dir():
        raise refuse(given, "is a file; give a run, sweep, plan or day-plan folder")
    if (folder / DAY_PLAN_FILE).is_file():
        return read_day_plan_folder(folder)
    if (folder / PLAN_FILE).is_file():
        return read_plan(folder)
    if (folder / SUMMARY_FILE).is_file():
        run = read_run(folder)
        require_served(run)
        return run
    if (folder / CONFIG_FILE).is_file():
        raise refuse(given, f"no {SUMMARY_FILE}: not a finished run (it failed or is running)")
    for collected in (folder, folder / COLLECTED_FOLDER):
        if (collected / RUNS_TABLE).is_file():
            return read_sweep(collected)
    if (folder / MULTIRUN_FILE).is_file() or any(folder.glob(f"*/{SUMMARY_FILE}")):
        raise refuse(given, f"a sweep not collected yet: run fleetcast collect {given} first")
    raise refuse(
        given,
        f"not a run, sweep, plan or day-plan folder (it holds no {SUMMARY_FILE}, "
        f"{COLLECTED_FOLDER}/{RUNS_TABLE}, {PLAN_FILE} or {DAY_PLAN_FILE})",
    )
