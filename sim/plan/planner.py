"""``fleetcast plan``: for each candidate deployment, the smallest replica count that meets
every SLO, verified with replications, and the candidates ranked cheapest first.

    fleetcast plan [overrides] [plan.slo=[...]] [plan.grid={...}] [plan.KEY=VALUE ...]
                   [hydra/launcher=... hydra.launcher.KEY=VALUE ...]

The overrides that do not start with ``plan.`` describe the base run (the workload, the SLO
bounds of ``slo.*``, anything a run takes); ``plan.*`` keys (``configs/plan/default.yaml``)
say what to plan. Each candidate (one combination of ``plan.grid``) is searched
(``sim.plan.search``) with each point replicated (``sim.plan.replications``) under seeds
``seed, seed + 1, ...``, the same for every candidate. A disaggregated candidate
(``placement=disaggregated``) is searched over its pools' total, the decode pool being the rest,
from its prefill pool plus one decode replica up (``sim.plan.candidates``); a grid over
``placement.prefill.replicas`` and ``placement.decode.hardware`` plans the xPyD ratio and each
pool's GPU, and each answer names its pools, each priced at its own GPU's rate. The plan
folder holds:

- ``plan_request.json``: the checked plan (what the sweeper reads);
- ``runs/KEY/``: one folder per simulation (``config.yaml``, ``summary.json``), KEY a hash of
  its overrides and the Fleetcast version: a rerun into the same folder resumes
  (``sim.plan.runs``);
- ``plan.parquet``: one row per simulation (candidate, replicas, replication, seed, the point's
  decision, every summary number flattened as ``fleetcast collect`` does);
- ``plan.json``: per candidate its answer: the replica count, $/hour and $ per million output
  tokens, each SLO statistic's mean and confidence interval, the probability of a miss, the
  stability verdicts, every point evaluated; infeasible candidates with the reason;

and the ranked table is printed at the end. At each answer the plan adds what-ifs (the count
with steps 10% faster or slower, and with 20% more traffic, searched outward from the answer)
and the headroom (the rate multiple at which the chosen fleet stops being stable).

The searches run side by side and their simulations go out in rounds (``sim.plan.rounds``):
the command as a Hydra multirun whose sweeper is the plan, each simulation a job of the chosen
launcher (``hydra/launcher=...``: local cores by default, a Ray cluster), as a sweep's jobs;
``run_plan`` (the Python API) on local processes (``plan.jobs``). Hydra overrides
(``hydra.launcher.*``) go to the launcher. A trace file's content is not part of a
simulation's identity in ``runs/``.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Annotated, Any, ClassVar

import pyarrow.parquet as pq
from pydantic import Field

import sim
from sim.config.validation import Count, StrictModel, validate
from sim.errors import ConfigError, require
from sim.plan.answer import Answer, answer_json, ranked_table, rows_table
from sim.plan.candidates import (
    checked_fewest,
    fewest_replicas,
    plan_candidates,
    refuse_planned,
)
from sim.plan.day import DAY_PLAN_FILE, DayPlanConfig, day_checks, day_table
from sim.plan.replications import Point, evaluate
from sim.plan.rounds import Rounds
from sim.plan.runs import INTERRUPTED_STATUS, Job, LocalLauncher, RefusedRun, Simulations
from sim.plan.search import smallest_meeting
from sim.plan.slo import Constraint, parse


class PlanConfig(StrictModel):
    section: ClassVar[str] = "plan"

    slo: list[str]
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    # candidates given one by one (added to the grid's), each a list of overrides
    candidates: list[list[str]] = Field(default_factory=list)
    max_replicas: Count = 64
    min_replications: Count = 3
    max_replications: Count = 10
    confidence: float = Field(0.95, gt=0, lt=1)
    # the largest share of a chosen count's replications that may miss an SLO
    max_miss_probability: float = Field(0.2, ge=0, le=1)
    jobs: Count | None = None
    output_dir: str | None = None
    # what-ifs at each answer: the count if every step were this much slower or faster, and
    # if the arrival rate were this much higher (sim.step_time_scale, sim.arrival_rate_scale)
    step_time_scales: list[Annotated[float, Field(gt=0)]] = Field(default_factory=list)
    rate_scales: list[Annotated[float, Field(gt=0)]] = Field(default_factory=list)
    # the headroom: the rate multiple at which the chosen fleet stops being stable (the knee),
    # searched up to this multiple (null: not searched)
    max_headroom: Annotated[float, Field(gt=1)] | None = None
    # the first replication's seed (then seed + 1, ...); null: the config's seed
    seed: Annotated[int, Field(ge=0, le=2**31 - 1)] | None = None
    # a day of a `daily` workload planned by period (sim.plan.day); periods null: no day plan
    day: DayPlanConfig = Field(default_factory=DayPlanConfig)


def load_plan(overrides: list[str]) -> tuple[PlanConfig, list[str]]:
    """The plan settings (defaults, then the ``plan.*`` overrides) and the other overrides."""
    from omegaconf import OmegaConf

    from sim.resources import config_dir

    mine = [o for o in overrides if o.startswith("plan.")]
    rest = [o for o in overrides if not o.startswith("plan.")]
    node = OmegaConf.load(config_dir() / "plan" / "default.yaml")
    try:
        given = OmegaConf.from_dotlist([o.removeprefix("plan.") for o in mine])
        merged = OmegaConf.to_container(OmegaConf.merge(node, given))
    except Exception as err:  # OmegaConf's grammar and merge errors have many types
        reason = " ".join(str(err).split())
        raise ConfigError("plan", " ".join(mine), f"cannot read: {reason}") from None
    refuse_planned(rest)
    return validate(PlanConfig, merged, "plan"), rest


def plan_candidate(
    candidate: list[str],
    sims: Simulations,
    constraints: list[Constraint],
    plan: PlanConfig,
    fewest: int = 1,
) -> Answer:
    """The search for one candidate, then its what-ifs and headroom at the answer, side by
    side (runs in a search thread of ``sim.plan.rounds``). ``fewest``: the fewest replicas
    its fleet can have (``fewest_replicas``); no search asks for fewer."""

    def search(extra: list[str], start: int) -> tuple[int | None, dict[int, Point]]:
        def point(replicas: int) -> Point:
            return evaluate(
                replicas,
                lambda r: sims.summary([*candidate, *extra], replicas, r),
                constraints,
                min_replications=plan.min_replications,
                max_replications=plan.max_replications,
                confidence=plan.confidence,
                max_miss_probability=plan.max_miss_probability,
                fetch=lambda rs: sims.summaries([*candidate, *extra], replicas, rs),
            )

        return smallest_meeting(
            point, lambda p: p.decision == "meets", plan.max_replicas, start=start, lowest=fewest
        )

    label = " ".join(candidate) or "base"
    try:
        found, points = search([], fewest)
    except RefusedRun as err:  # a combination the catalog cannot run (FP8 on an A100)
        return Answer(label, candidate, None, {}, f"cannot run: {err}")
    if not points:
        return Answer(
            label,
            candidate,
            None,
            points,
            f"needs {fewest} replicas at least (its prefill pool and one decode replica), "
            f"above plan.max_replicas={plan.max_replicas}",
        )
    if found is None:
        last = points[max(points)]
        return Answer(
            label,
            candidate,
            None,
            points,
            f"misses at {max(points)} replicas ({last.reason}): no count up to "
            f"plan.max_replicas={plan.max_replicas} meets every SLO",
        )
    answer = Answer(label, candidate, found, points, "")
    whatifs = [f"step_time x{k:g}" for k in plan.step_time_scales] + [
        f"rate x{k:g}" for k in plan.rate_scales
    ]
    scaled = [f"sim.step_time_scale={k:g}" for k in plan.step_time_scales] + [
        f"sim.arrival_rate_scale={k:g}" for k in plan.rate_scales
    ]
    searches: list[Callable[[], Any]] = [
        partial(_unless_refused, partial(search, [extra], found)) for extra in scaled
    ]
    if plan.max_headroom is not None:
        most = plan.max_headroom
        searches.append(partial(_unless_refused, lambda: _headroom(candidate, found, sims, most)))
    results = sims.rounds.parallel(searches)
    # a what-if its candidate cannot run (a rate what-if of a closed-loop candidate) is left out
    answer.whatifs = {
        name: found for name, found in zip(whatifs, results, strict=False) if found is not None
    }
    if plan.max_headroom is not None:
        answer.headroom = results[-1] or {}
    return answer


def _unless_refused(search: Callable[[], Any]) -> Any:
    """``search()``, or None when a simulation it needs is refused."""
    try:
        return search()
    except RefusedRun:
        return None


def _headroom(
    candidate: list[str], replicas: int, sims: Simulations, most: float
) -> dict[float, dict[str, Any]]:
    """The chosen fleet at rising rate multiples (one replication each): 1.25, 2.5, 5, ...
    until it is no longer ``stable`` (near saturation, undetermined or unstable: the knee) or
    past ``most``, then bisected (in ratio) to within 5%."""
    seen: dict[float, dict[str, Any]] = {}

    def unstable(k: float) -> bool:
        k = float(f"{k:.4g}")
        if k not in seen:
            extra = [f"sim.arrival_rate_scale={k:g}"]
            seen[k] = sims.summary([*candidate, *extra], replicas, 0)
        return (seen[k].get("stability") or {}).get("verdict") != "stable"

    low, k = 1.0, 1.25
    while not unstable(k):
        low = k
        if k >= most:
            return seen
        k = min(2 * k, most)
    high = k
    while high / low > 1.05:
        mid = math.sqrt(low * high)
        if unstable(mid):
            high = mid
        else:
            low = mid
    return seen


@dataclass
class Prepared:
    """A plan checked and ready to run: its settings, base overrides, first seed, candidates
    and folder (``plan_request.json`` in the folder, for Hydra's sweeper)."""

    plan: PlanConfig
    base: list[str]
    seed: int
    candidates: list[list[str]]
    folder: Path
    day_workload: dict[str, Any] | None = None  # a day plan's base workload, composed
    # each candidate's fewest replicas (fewest_replicas); None: 1 for every candidate
    fewest: list[int] | None = None

    REQUEST_FILE: ClassVar[str] = "plan_request.json"

    def write(self) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / self.REQUEST_FILE
        text = json.dumps(
            {
                "plan": self.plan.model_dump(),
                "base": self.base,
                "seed": self.seed,
                "candidates": self.candidates,
                "folder": str(self.folder),
                "day_workload": self.day_workload,
                "fewest": self.fewest,
                "version": sim.__version__,
            },
            indent=1,
        )
        tmp = path.with_name(f".{path.name}.partial")
        tmp.write_text(text + "\n")
        tmp.replace(path)
        return path

    @classmethod
    def read(cls, path: Path) -> Prepared:
        given = json.loads(path.read_text())
        return cls(
            validate(PlanConfig, given["plan"], "plan"),
            given["base"],
            given["seed"],
            given["candidates"],
            Path(given["folder"]),
            given.get("day_workload"),
            given.get("fewest"),
        )


def prepare(overrides: list[str]) -> Prepared:
    """Check everything a plan is given before any of its simulations runs: the ``plan.*``
    settings, the base and every candidate composed, the SLOs against an example summary (one
    replica of the base deployment, simulated here). ConfigError on the first problem."""
    from sim.config.compose import check_overrides, compose_config
    from sim.run import simulate

    plan, base = load_plan(overrides)
    check_overrides(base)
    require(
        plan.min_replications <= plan.max_replications,
        "plan.min_replications",
        plan.min_replications,
        f"must be <= plan.max_replications ({plan.max_replications})",
    )
    cfg = compose_config(base)
    seed = int(cfg.get("seed", 0)) if plan.seed is None else plan.seed
    if cfg["workload"].get("kind") == "closed_loop" and (plan.rate_scales or plan.max_headroom):
        # no arrival rate to scale: the clients send as requests end
        plan = plan.model_copy(update={"rate_scales": [], "max_headroom": None})
    folder = Path(
        plan.output_dir or Path("plans") / datetime.now().strftime("%Y-%m-%d/%H-%M-%S")
    ).expanduser()
    each = plan_candidates(plan.grid, plan.candidates)
    # every candidate's overrides checked and composed before any simulation runs
    fewest = checked_fewest(base, each, compose_config)
    day = plan.day.periods is not None  # (its first period's workload for the example run)
    for least in fewest:
        require(
            not day or least == 1,
            "placement",
            "disaggregated",
            "a day plan's seasonal and autoscaled fleets scale one pool: not modelled for a "
            "disaggregated fleet (plan its peak without plan.day)",
        )
    example_base = [*base, *day_checks(plan.day, cfg, each)] if day else base
    # an example summary (the fewest replicas of the base deployment) names the statistics
    example_overrides = Simulations(example_base, seed, Rounds(list)).overrides(
        [], fewest_replicas(cfg), 0
    )
    example = simulate(compose_config(example_overrides)).summary
    constraints = [parse(text, example) for text in plan.slo]
    require(bool(constraints), "plan.slo", plan.slo, "give at least one SLO")
    return Prepared(
        plan, base, seed, each, folder.absolute(), cfg["workload"] if day else None, fewest
    )


def execute(
    prepared: Prepared, launch: Callable[[list[Job]], Sequence[dict[str, Any]]], progress: bool
) -> dict[str, Any]:
    """Run a prepared plan, its simulations launched in rounds by ``launch``; write
    ``plan.parquet`` and ``plan.json`` into its folder and return ``plan.json``'s object (a
    day plan: ``day_plan.json``'s, ``sim.plan.day``)."""
    if prepared.plan.day.periods is not None:
        from sim.plan.day import plan_day

        return plan_day(prepared, launch, progress)
    plan, each, folder = prepared.plan, prepared.candidates, prepared.folder
    fewest = prepared.fewest or [1] * len(each)
    constraints = [parse(text) for text in plan.slo]
    with _Progress(len(each), progress) as bar:
        rounds: Rounds[Job] = Rounds(launch, on_round=bar.round)
        sims = Simulations(prepared.base, prepared.seed, rounds)

        def one(candidate: list[str], least: int) -> Answer:
            answer = plan_candidate(candidate, sims, constraints, plan, least)
            bar.done(answer)
            return answer

        ordered = rounds.run([partial(one, c, n) for c, n in zip(each, fewest, strict=True)])
    plan_json = {
        "slo": [str(c) for c in constraints],
        "confidence": plan.confidence,
        "max_miss_probability": plan.max_miss_probability,
        "base_overrides": prepared.base,
        "seed": prepared.seed,
        "candidates": [answer_json(a, plan) for a in ordered],
    }
    folder.mkdir(parents=True, exist_ok=True)
    table = rows_table(ordered, prepared.seed, list(plan.grid))
    tmp = folder / ".plan.parquet.partial"
    pq.write_table(table, tmp)
    tmp.replace(folder / "plan.parquet")
    tmp = folder / ".plan.json.partial"
    tmp.write_text(json.dumps(plan_json, indent=1) + "\n")
    tmp.replace(folder / "plan.json")
    return plan_json


def run_plan(overrides: list[str], progress: bool = True) -> tuple[Path, dict[str, Any]]:
    """Plan (module docstring) from Python, the simulations on local processes
    (``plan.jobs``); returns the plan folder and ``plan.json``'s object."""
    prepared = prepare(overrides)
    jobs = prepared.plan.jobs or os.cpu_count() or 1
    with LocalLauncher(prepared.folder, jobs) as launch:
        return prepared.folder, execute(prepared, launch, progress)


class _Progress:
    """One line per candidate as it is planned and, on a terminal, a progress bar over the
    candidates whose postfix counts the simulations launched so far. Silent unless
    ``shown``."""

    def __init__(self, total: int, shown: bool) -> None:
        self.total, self.shown = total, shown
        self.planned = 0
        self._lock = threading.Lock()  # candidates end in their own threads
        self._bar: Any = None

    def __enter__(self) -> _Progress:
        if self.shown and sys.stderr.isatty():  # the lines alone in a log
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, unit="candidate", file=sys.stderr, leave=False)
        return self

    def round(self, launched: int, total: int) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(f"{total} simulations")

    def done(self, answer: Answer) -> None:
        with self._lock:
            self.planned += 1
            if not self.shown:
                return
            found = f"{answer.replicas} replica(s)" if answer.replicas is not None else "infeasible"
            if answer.fleet is not None:
                found += f" = {answer.fleet}"
            simulations = sum(p.replications for p in answer.points.values())
            line = (
                f"[{self.planned}/{self.total}] {answer.label}: {found} ({len(answer.points)} "
                f"counts, {simulations} simulations)"
            )
            if self._bar is None:
                print(line, file=sys.stderr)
                return
            self._bar.write(line, file=sys.stderr)
            self._bar.update(1)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()


# Hydra keys the plan sets for its sweep (its folder is plan.output_dir)
HYDRA_SET = ("hydra.sweep", "hydra.sweeper", "hydra/sweeper")
# launchers whose processes plan.jobs sets (hydra.launcher.n_jobs)
JOBLIB_LAUNCHERS = ("=joblib", "=fleetcast_joblib")


def main(argv: list[str], run_hydra: Callable[[list[str]], None]) -> int:
    """``fleetcast plan [overrides] [plan.KEY=VALUE ...] [hydra overrides]``: checked here,
    then run as a Hydra multirun (``run_hydra``, the command line's runner) whose sweeper is
    the plan (its simulations go through the chosen launcher, as a sweep's jobs do), and the
    ranked table printed."""
    from sim.config.compose import HYDRA_OVERRIDE

    if any(arg in ("-h", "--help") for arg in argv):
        print(__doc__)
        return 0
    hydra_args = [a for a in argv if a.startswith(HYDRA_OVERRIDE)]
    try:
        for arg in hydra_args:
            key, _, value = arg.lstrip("+~").partition("=")
            require(
                not key.startswith(HYDRA_SET),
                key,
                value,
                "fleetcast plan sets it; the plan folder is plan.output_dir",
            )
        prepared = prepare([a for a in argv if not a.startswith(HYDRA_OVERRIDE)])
        launcher = [a for a in hydra_args if a.startswith("hydra/launcher=")]
        jobs = prepared.plan.jobs
        require(
            jobs is None or not launcher or launcher[-1].endswith(JOBLIB_LAUNCHERS),
            "plan.jobs",
            jobs,
            f"sets the joblib launcher's processes; with {launcher[-1] if launcher else ''} "
            "give its own settings (hydra.launcher.*)",
        )
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # (while the plan is checked; once it runs: its sweeper's)
        print("interrupted: fleetcast plan stopped before any simulation ran", file=sys.stderr)
        return INTERRUPTED_STATUS
    request = prepared.write()
    run_hydra(
        [
            "-m",
            "hydra/sweeper=fleetcast_plan",
            f"hydra.sweeper.request={_quoted(str(request))}",
            f"hydra.sweep.dir={_quoted(str(prepared.folder))}",
            "hydra.output_subdir=null",  # a job folder holds config.yaml and summary.json
            "hydra/hydra_logging=disabled",  # no line per job: the progress says it
            "hydra/job_logging=disabled",
            "~hydra.callbacks.sweep_monitor",  # a sweep's progress and table, not a plan's
            *([f"hydra.launcher.n_jobs={jobs}"] if jobs is not None else []),
            *hydra_args,
        ]
    )
    if prepared.plan.day.periods is not None:
        print(day_table(json.loads((prepared.folder / DAY_PLAN_FILE).read_text())))
        print(f"plan: {prepared.folder}")
        return 0
    plan_json = json.loads((prepared.folder / "plan.json").read_text())
    print(ranked_table(plan_json))
    print(f"plan: {prepared.folder}")
    return 0


def _quoted(text: str) -> str:
    """``text`` as a quoted value of a Hydra override: backslashes that would escape the
    closing quote or a quote doubled, quotes escaped, and ``${`` escaped (not an
    interpolation)."""
    text = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, text)
    return "'" + text.replace("'", "\\'").replace("${", "\\${") + "'"
