"""``fleetcast plan``: for each candidate deployment, the smallest replica count that meets
every SLO, verified with replications, and the candidates ranked cheapest first.

    fleetcast plan [overrides] [plan.slo=[...]] [plan.grid={...}] [plan.KEY=VALUE ...]

The overrides that do not start with ``plan.`` describe the base run (the workload, the SLO
bounds of ``slo.*``, anything a run takes); ``plan.*`` keys (``configs/plan/default.yaml``)
say what to plan. Each candidate (one combination of ``plan.grid``) is searched
(``sim.plan.search``) with each point replicated (``sim.plan.replications``) under seeds
``seed, seed + 1, ...``, the same for every candidate. The plan folder holds:

- ``runs/``: one summary per simulation, named by a hash of its resolved config and the
  Fleetcast version: a rerun into the same folder reuses them (resumes);
- ``plan.parquet``: one row per simulation (candidate, replicas, replication, seed, the point's
  decision, every summary number flattened as ``fleetcast collect`` does);
- ``plan.json``: per candidate its answer: the replica count, $/hour and $ per million output
  tokens, each SLO statistic's mean and confidence interval, the probability of a miss, the
  stability verdicts, every point evaluated; infeasible candidates with the reason;

and the ranked table is printed at the end. At each answer the plan adds what-ifs (the count
with steps 10% faster or slower, and with 20% more traffic, searched outward from the answer)
and the headroom (the rate multiple at which the chosen fleet stops being stable). Left out
(to come): running the points through Hydra's launchers (candidates run in parallel on local
processes, ``plan.jobs``), and a trace's content in the run cache's key.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
import threading
from concurrent.futures import ProcessPoolExecutor, as_completed
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, ClassVar

import pyarrow.parquet as pq
from pydantic import Field

from sim.config.validation import Count, StrictModel, validate
from sim.errors import ConfigError, require
from sim.plan.answer import Answer, answer_json, ranked_table, rows_table
from sim.plan.replications import Point, evaluate
from sim.plan.runs import Simulations
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


def plan_candidate(
    candidate: list[str], sims: Simulations, constraints: list[Constraint], plan: PlanConfig
) -> Answer:
    """The search for one candidate, then its what-ifs and headroom at the answer."""

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
            )

        return smallest_meeting(
            point, lambda p: p.decision == "meets", plan.max_replicas, start=start
        )

    label = " ".join(candidate) or "base"
    try:
        found, points = search([], 1)
    except ConfigError as err:  # a combination the catalog cannot run (FP8 on an A100)
        return Answer(label, candidate, None, {}, f"cannot run: {err}")
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
    for scale in plan.step_time_scales:
        answer.whatifs[f"step_time x{scale:g}"] = search([f"sim.step_time_scale={scale:g}"], found)
    for scale in plan.rate_scales:
        answer.whatifs[f"rate x{scale:g}"] = search([f"sim.arrival_rate_scale={scale:g}"], found)
    if plan.max_headroom is not None:
        answer.headroom = _headroom(candidate, found, sims, plan.max_headroom)
    return answer


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


def run_plan(overrides: list[str], progress: bool = True) -> tuple[Path, dict[str, Any]]:
    """Plan (module docstring); returns the plan folder and ``plan.json``'s object."""
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
    each = [c for c in candidates(plan.grid) if c or not plan.candidates] + plan.candidates
    for candidate in each:  # every candidate's overrides composed before any simulation runs
        refuse_planned(candidate)
        check_overrides([*base, *candidate])
        compose_config([*base, *candidate])  # (what only a run finds: the candidate's answer)
    sims = Simulations(base, folder, seed)
    # an example summary (one replica of the base deployment) names the statistics
    example = simulate(compose_config(sims.overrides([], 1, 0))).summary
    constraints = [parse(text, example) for text in plan.slo]
    require(bool(constraints), "plan.slo", plan.slo, "give at least one SLO")
    answers: dict[int, Answer] = {}
    jobs = min(plan.jobs or os.cpu_count() or 1, len(each))
    with _Progress(folder / "runs", len(each), progress) as bar:
        if jobs > 1:
            with ProcessPoolExecutor(jobs) as pool:
                futures = {
                    pool.submit(plan_candidate, c, sims, constraints, plan): i
                    for i, c in enumerate(each)
                }
                for future in as_completed(futures):
                    answers[futures[future]] = future.result()
                    bar.done(answers[futures[future]])
        else:
            for i, candidate in enumerate(each):
                answers[i] = plan_candidate(candidate, sims, constraints, plan)
                bar.done(answers[i])
    ordered = [answers[i] for i in range(len(each))]
    plan_json = {
        "slo": [str(c) for c in constraints],
        "confidence": plan.confidence,
        "max_miss_probability": plan.max_miss_probability,
        "base_overrides": base,
        "seed": seed,
        "candidates": [answer_json(a, plan) for a in ordered],
    }
    folder.mkdir(parents=True, exist_ok=True)
    table = rows_table(ordered, seed, list(plan.grid))
    tmp = folder / ".plan.parquet.partial"
    pq.write_table(table, tmp)
    tmp.replace(folder / "plan.parquet")
    tmp = folder / ".plan.json.partial"
    tmp.write_text(json.dumps(plan_json, indent=1) + "\n")
    tmp.replace(folder / "plan.json")
    return folder, plan_json


class _Progress:
    """One line per candidate as it is planned and, on a terminal, a progress bar over the
    candidates whose postfix counts the simulations in the run cache so far (every half second,
    by a thread: the searches run elsewhere). Silent unless ``shown``."""

    def __init__(self, runs: Path, total: int, shown: bool) -> None:
        self.runs, self.total, self.shown = runs, total, shown
        self.planned = 0
        self._stop = threading.Event()
        self._bar: Any = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> _Progress:
        if self.shown and sys.stderr.isatty():  # the lines alone in a log
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, unit="candidate", file=sys.stderr, leave=False)
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop.wait(0.5):
            count = sum(1 for p in self.runs.glob("*.json")) if self.runs.is_dir() else 0
            self._bar.set_postfix_str(f"{count} simulations")

    def done(self, answer: Answer) -> None:
        self.planned += 1
        if not self.shown:
            return
        found = f"{answer.replicas} replica(s)" if answer.replicas is not None else "infeasible"
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
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._bar is not None:
            self._bar.close()


def main(argv: list[str]) -> int:
    """``fleetcast plan [overrides] [plan.KEY=VALUE ...]``."""
    if any(arg in ("-h", "--help") for arg in argv):
        print(__doc__)
        return 0
    try:
        folder, plan_json = run_plan(argv, progress=True)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(ranked_table(plan_json))
    print(f"plan: {folder}")
    return 0
