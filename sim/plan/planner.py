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
and the headroom (the rate multiple at which the chosen fleet stops being stable). With
``plan.model_error=measured`` it also searches each answer with every step at the median and
at the 90th percentile of the step-time model's measured error for the candidate's class
(``sim.output.model_error``; the bands are looked up here, before Hydra's sweeper starts) and
answers with both, and ``plan.json`` holds the band as ``model_error``.

With ``plan.solve=max_rate`` the plan answers for one fleet, the config as given (its
``fleet.replicas`` included; no grid): the highest arrival rate, in requests/s and tokens/s,
at which it meets every SLO, searched over multiples of the config's rate from 1 up to
``plan.max_rate_factor`` or down to ``plan.min_rate_factor`` and bisected to within
``plan.rate_tolerance``, with the interval of its replications' own capacities
(``sim.plan.capacity``); ``plan.json`` holds it as ``capacity``, and the answer printed says
how the search ended. It has no what-ifs or headroom.

With ``plan.faults.availability`` (and ``faults.gpu_mtbf_h``, ``faults.repair_h``), the
searches run with faults off, so each answer's count is the load's N, and its spares k are
computed exactly from the rates (``sim.plan.spares``): the fewest, at the cheapest mix of
``plan.faults.tiers``, that keep N up with that probability. Each candidate's replica (its
GPUs, each tier's price and unavailability) is found here, with the configs composed, and
kept in ``plan_request.json``; the answer's ``replicas`` and $/hour are N + k's.

The searches run side by side and their simulations go out in rounds (``sim.plan.rounds``):
the command as a Hydra multirun whose sweeper is the plan, each simulation a job of the chosen
launcher (``hydra/launcher=...``: local cores by default, a Ray cluster), as a sweep's jobs;
``run_plan`` (the Python API) on local processes (``plan.jobs``). Hydra overrides
(``hydra.launcher.*``) go to the launcher. A trace file's content is not part of a
simulation's identity in ``runs/``.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from sim.config.compose import HYDRA_OVERRIDE, check_overrides, compose_config
from sim.errors import ConfigError, require
from sim.output.model_error import band_for, read_bands, shipped_bands_path
from sim.plan import INTERRUPTED_STATUS, STOPPED_BEFORE_RUNS
from sim.plan.answer import ModelError, ranked_table
from sim.plan.candidates import checked_fewest, every_candidate, fewest_replicas
from sim.plan.capacity import capacity_text, plan_capacity
from sim.plan.day import DAY_PLAN_FILE, day_checks, day_table, plan_day
from sim.plan.rounds import Rounds
from sim.plan.runs import Job, LocalLauncher, Simulations, interrupted
from sim.plan.searches import FAULTS_OFF, plan_candidates
from sim.plan.settings import MAX_RATE, PlanConfig, Prepared, load_plan
from sim.plan.slo import parse
from sim.plan.spares import replica_tiers
from sim.run import simulate

__all__ = ["PlanConfig", "Prepared", "execute", "load_plan", "main", "prepare", "run_plan"]


def prepare(overrides: list[str]) -> Prepared:
    """Check everything a plan is given before any of its simulations runs: the ``plan.*``
    settings, the base and every candidate composed, the SLOs against an example summary (one
    replica of the base deployment, simulated here). ConfigError on the first problem."""
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
    spared = plan.faults.availability is not None
    require(
        not spared or plan.solve != MAX_RATE,
        "plan.faults.availability",
        plan.faults.availability,
        "plan.solve=max_rate answers for the fleet as given: spares are a cheapest_fleet answer's",
    )
    if plan.solve == MAX_RATE:
        return _prepare_capacity(plan, base, cfg, seed)
    closed = cfg["workload"].get("kind") == "closed_loop"
    if closed and (plan.rate_scales or plan.max_headroom or plan.slo_headroom):
        # no arrival rate to scale: the clients send as requests end
        plan = plan.model_copy(
            update={"rate_scales": [], "max_headroom": None, "slo_headroom": False}
        )
    folder = _folder(plan)
    each = every_candidate(plan.grid, plan.candidates)
    # what the searches simulate: with spares computed, faults off (a spot reclaim rate, say,
    # is then a rate of the spares' tiers, not of the base fleet, which may buy no spot)
    simulated = [*base, *FAULTS_OFF] if spared else base
    # every candidate's overrides checked and composed before any simulation runs
    fewest = checked_fewest(simulated, each, compose_config)
    spares = _spares(plan, base, each)
    day = plan.day.periods is not None  # (its first period's workload for the example run)
    for least in fewest:
        require(
            not day or least == 1,
            "placement",
            "disaggregated",
            "a day plan's seasonal and autoscaled fleets scale one pool: not modelled for a "
            "disaggregated fleet (plan its peak without plan.day)",
        )
    example_base = [*simulated, *day_checks(plan.day, cfg, each)] if day else simulated
    # an example summary (the fewest replicas of the base deployment) names the statistics
    _check_slo(plan, example_base, seed, fewest_replicas(cfg))
    return Prepared(
        plan,
        base,
        seed,
        each,
        folder.absolute(),
        cfg["workload"] if day else None,
        fewest,
        model_errors=_model_errors(plan, base, each),
        spares=spares,
    )


def _spares(
    plan: PlanConfig, base: list[str], each: list[list[str]]
) -> list[dict[str, Any]] | None:
    """``plan.faults.availability``: each candidate's replica as its spares are weighed
    (``replica_tiers``: its GPUs, each tier's price and unavailability); None: off.
    ConfigError without a failure rate, or for a tier without a price."""
    if plan.faults.availability is None:
        return None
    return [
        replica_tiers(compose_config([*base, *candidate]), plan.faults.tiers) for candidate in each
    ]


def _model_errors(
    plan: PlanConfig, base: list[str], each: list[list[str]]
) -> list[dict[str, Any]] | None:
    """``plan.model_error=measured``: each candidate's class and band (``ModelError.json``);
    None: off. ConfigError on a bad ``plan.model_error_table``."""
    if plan.model_error == "off":
        return None
    given = plan.model_error_table
    table = read_bands(Path(given).expanduser() if given else shipped_bands_path())
    out = []
    for candidate in each:
        cfg = compose_config([*base, *candidate])
        klass, band = band_for(cfg, table)
        out.append(ModelError(klass, band).json())
    return out


def _folder(plan: PlanConfig) -> Path:
    """The plan folder: ``plan.output_dir``, else ``plans/DATE/TIME``."""
    return Path(
        plan.output_dir or Path("plans") / datetime.now().strftime("%Y-%m-%d/%H-%M-%S")
    ).expanduser()


def _check_slo(plan: PlanConfig, base: list[str], seed: int, replicas: int) -> None:
    """ConfigError unless ``plan.slo`` holds constraints on numbers of an example summary
    (``replicas`` of the ``base`` deployment, simulated here)."""
    example_overrides = Simulations(base, seed, Rounds(list)).overrides([], replicas, 0)
    example = simulate(compose_config(example_overrides)).summary
    constraints = [parse(text, example) for text in plan.slo]
    require(bool(constraints), "plan.slo", plan.slo, "give at least one SLO")


# the keys a capacity plan sets or cannot take (plan.solve=max_rate: one fleet, at the rates
# it searches)
ONE_FLEET = ("grid", "candidates")


def _prepare_capacity(
    plan: PlanConfig, base: list[str], cfg: dict[str, Any], seed: int
) -> Prepared:
    """A capacity plan (``plan.solve=max_rate``, ``sim.plan.capacity``) checked: one fleet,
    the config's own (its ``fleet.replicas`` taken from it), an open-loop workload whose rate
    the plan scales, and the SLOs. ConfigError on the first problem."""
    for key in ONE_FLEET:
        given = getattr(plan, key)
        require(
            not given,
            f"plan.{key}",
            given,
            "plan.solve=max_rate answers for one fleet, the config as given: plan each "
            "candidate on its own",
        )
    require(
        plan.day.periods is None,
        "plan.day.periods",
        plan.day.periods,
        "plan.solve=max_rate answers for a stationary rate: not for a day plan",
    )
    for override in base:
        key, _, value = override.partition("=")
        require(
            key.lstrip("+~") != "sim.arrival_rate_scale",
            key,
            value,
            "plan.solve=max_rate sets it (the rate multiples it searches); give the base rate "
            "in the workload",
        )
    require(
        cfg["workload"].get("kind") != "closed_loop",
        "plan.solve",
        plan.solve,
        "a closed-loop workload has no arrival rate to raise (its clients send as requests "
        "end): use an open-loop workload, or plan.grid over workload.concurrency",
    )
    replicas = int(cfg["fleet"]["replicas"])
    # the planner sets the count on every simulation, as the config gives it
    base = [o for o in base if o.split("=", 1)[0].lstrip("+~") != "fleet.replicas"]
    _check_slo(plan, base, seed, replicas)
    return Prepared(plan, base, seed, [[]], _folder(plan).absolute(), replicas=replicas)


def execute(
    prepared: Prepared, launch: Callable[[list[Job]], Sequence[dict[str, Any]]], progress: bool
) -> dict[str, Any]:
    """Run a prepared plan, its simulations launched in rounds by ``launch``; write
    ``plan.parquet`` and ``plan.json`` into its folder and return ``plan.json``'s object (a
    day plan: ``day_plan.json``'s, ``sim.plan.day``)."""
    if prepared.plan.solve == MAX_RATE:
        return plan_capacity(prepared, launch, progress)
    if prepared.plan.day.periods is not None:
        return plan_day(prepared, launch, progress)
    return plan_candidates(prepared, launch, progress)


def run_plan(overrides: list[str], progress: bool = True) -> tuple[Path, dict[str, Any]]:
    """Plan (module docstring) from Python, the simulations on local processes
    (``plan.jobs``); returns the plan folder and ``plan.json``'s object."""
    prepared = prepare(overrides)
    jobs = prepared.plan.jobs or os.cpu_count() or 1
    with LocalLauncher(prepared.folder, jobs) as launch:
        return prepared.folder, execute(prepared, launch, progress)


# Hydra keys the plan sets for its sweep (its folder is plan.output_dir)
HYDRA_SET = ("hydra.sweep", "hydra.sweeper", "hydra/sweeper")
# launchers whose processes plan.jobs sets (hydra.launcher.n_jobs)
JOBLIB_LAUNCHERS = ("=joblib", "=fleetcast_joblib")


def main(argv: list[str], run_hydra: Callable[[list[str]], None]) -> int:
    """``fleetcast plan [overrides] [plan.KEY=VALUE ...] [hydra overrides]``: checked here,
    then run as a Hydra multirun (``run_hydra``, the command line's runner) whose sweeper is
    the plan (its simulations go through the chosen launcher, as a sweep's jobs do), and the
    ranked table printed."""
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
        print(STOPPED_BEFORE_RUNS, file=sys.stderr)
        return INTERRUPTED_STATUS
    try:
        return _run(prepared, hydra_args, run_hydra)
    except KeyboardInterrupt:  # Hydra's start-up (its sweeper catches its own) or the table
        return interrupted(prepared.folder)


def _run(prepared: Prepared, hydra_args: list[str], run_hydra: Callable[[list[str]], None]) -> int:
    """Run the checked plan ``prepared`` through Hydra, print its table; 0."""
    jobs = prepared.plan.jobs
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
    print(capacity_text(plan_json) if prepared.plan.solve == MAX_RATE else ranked_table(plan_json))
    print(f"plan: {prepared.folder}")
    return 0


def _quoted(text: str) -> str:
    """``text`` as a quoted value of a Hydra override: backslashes that would escape the
    closing quote or a quote doubled, quotes escaped, and ``${`` escaped (not an
    interpolation)."""
    text = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, text)
    return "'" + text.replace("'", "\\'").replace("${", "\\${") + "'"
