"""One plan's searches side by side: each candidate's smallest replica count that meets every
SLO (``sim.plan.search``, each point replicated by ``sim.plan.replications``), its what-ifs and
headroom at the answer (with faults on, the what-if of the same fleet without them: the count
the load needs, N, and the spare capacity the faults ask for, k), the progress shown per
candidate, and the plan's ``plan.parquet`` and ``plan.json`` (``sim.plan.planner``'s module
docstring says what they hold)."""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from sim.plan.answer import NO_FAULTS, Answer, ModelError, answer_json, rows_table
from sim.plan.capacity import fleet_capacity
from sim.plan.files import write_plan
from sim.plan.replications import Point, evaluate
from sim.plan.rounds import Rounds
from sim.plan.runs import Job, RefusedRun, Simulations
from sim.plan.search import smallest_meeting
from sim.plan.settings import PlanConfig, Prepared
from sim.plan.slo import Constraint, parse
from sim.plan.spares import spares_json

# overrides that turn every fault off (configs/faults/default.yaml's settings)
FAULTS_OFF = (
    "faults.gpu_mtbf_h=null",
    "faults.schedule=[]",
    "faults.maintenance=[]",
    "faults.spot=[]",
    "faults.spot_reclaims_per_h=null",
)


def without_faults(prepared: Prepared) -> list[str]:
    """The base overrides a plan simulates: with its spares computed
    (``plan.faults.availability``), its faults off (``FAULTS_OFF``), so that the count found
    is the load's N and the rates give k; otherwise as given."""
    return [*prepared.base, *FAULTS_OFF] if prepared.spares is not None else prepared.base


def plan_candidate(
    candidate: list[str],
    sims: Simulations,
    constraints: list[Constraint],
    plan: PlanConfig,
    fewest: int = 1,
    model_error: ModelError | None = None,
    replica: dict[str, Any] | None = None,
) -> Answer:
    """The search for one candidate, then its what-ifs and headrooms (to the knee, to the
    SLO) at the answer, side by side (runs in a search thread of ``sim.plan.rounds``).
    ``fewest``: the fewest replicas its fleet can have (``fewest_replicas``); no search asks
    for fewer. ``model_error``: its class and band (``plan.model_error=measured``): the
    answer searched again at the band's p50 and p90 step-time multiples. ``replica``: its
    replica as its spares are weighed (``plan.faults.availability``, ``replica_tiers``): the
    answer's count is the load's N (the simulations run without faults), and its spares k the
    cheapest that keep N up as often as asked (``spares_json``)."""

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
    answer = Answer(label, candidate, found, points, "", model_error=model_error)
    if replica is not None:
        asked = plan.faults.availability
        assert asked is not None, "a replica's tiers are found only with an availability"
        answer.spares = spares_json(found, replica, asked, plan.faults.max_spares)
    whatifs = [f"step_time x{k:g}" for k in plan.step_time_scales] + [
        f"rate x{k:g}" for k in plan.rate_scales
    ]
    scaled = [[f"sim.step_time_scale={k:g}"] for k in plan.step_time_scales] + [
        [f"sim.arrival_rate_scale={k:g}"] for k in plan.rate_scales
    ]
    band = model_error.band if model_error is not None else None
    if band is not None:  # the model's own error: every step at the band's p50, then its p90
        for quantile in ("p50", "p90"):
            whatifs.append(band.label(quantile))
            scaled.append([f"sim.step_time_scale={getattr(band, quantile):g}"])
    if "faults" in points[found].summaries[0]:
        # the same fleet that never fails: its count is the load's (N), the rest the spare
        # capacity the faults ask for (k)
        whatifs.append(NO_FAULTS)
        scaled.append(list(FAULTS_OFF))
    searches: list[Callable[[], Any]] = [
        partial(_unless_refused, partial(search, extra, found)) for extra in scaled
    ]
    if plan.max_headroom is not None:
        most = plan.max_headroom
        searches.append(partial(_unless_refused, lambda: _headroom(candidate, found, sims, most)))
    if plan.slo_headroom:
        to_slo = partial(
            fleet_capacity, sims, constraints, plan, found, candidate=candidate, interval=False
        )
        searches.append(partial(_unless_refused, to_slo))
    results = sims.rounds.parallel(searches)
    # a what-if its candidate cannot run (a rate what-if of a closed-loop candidate) is left out
    answer.whatifs = {
        name: found for name, found in zip(whatifs, results, strict=False) if found is not None
    }
    rest = results[len(scaled) :]
    if plan.max_headroom is not None:
        answer.headroom = rest.pop(0) or {}
    if plan.slo_headroom:
        answer.slo_headroom = rest.pop(0)
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


def plan_candidates(
    prepared: Prepared, launch: Callable[[list[Job]], Sequence[dict[str, Any]]], progress: bool
) -> dict[str, Any]:
    """Run a prepared plan of candidates (not a day plan), its simulations launched in rounds
    by ``launch``; write ``plan.parquet`` and ``plan.json`` into its folder and return
    ``plan.json``'s object."""
    plan, each, folder = prepared.plan, prepared.candidates, prepared.folder
    fewest = prepared.fewest or [1] * len(each)
    constraints = [parse(text) for text in plan.slo]
    given = prepared.model_errors
    errors = [None] * len(each) if given is None else [ModelError.from_json(g) for g in given]
    with _Progress(len(each), progress) as bar:
        rounds: Rounds[Job] = Rounds(launch, on_round=bar.round)
        sims = Simulations(without_faults(prepared), prepared.seed, rounds)

        def one(
            candidate: list[str],
            least: int,
            error: ModelError | None,
            replica: dict[str, Any] | None,
        ) -> Answer:
            answer = plan_candidate(candidate, sims, constraints, plan, least, error, replica)
            bar.done(answer)
            return answer

        replicas: list[dict[str, Any] | None] = (
            list(prepared.spares) if prepared.spares is not None else [None] * len(each)
        )
        ordered = rounds.run(
            [partial(one, *c) for c in zip(each, fewest, errors, replicas, strict=True)]
        )
    plan_json = {
        "slo": [str(c) for c in constraints],
        "confidence": plan.confidence,
        "max_miss_probability": plan.max_miss_probability,
        "base_overrides": sims.base,  # (as simulated: faults off with computed spares)
        "seed": prepared.seed,
        "candidates": [answer_json(a, plan) for a in ordered],
    }
    write_plan(folder, rows_table(ordered, prepared.seed, list(plan.grid)), plan_json)
    return plan_json


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
            # (tqdm, only for a bar on a terminal: a plan in a log or a test never imports it)
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
