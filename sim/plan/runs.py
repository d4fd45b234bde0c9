"""The simulations of a plan: each one a job with its own folder, run once.

A job is the plan's base overrides, a candidate's, the replica count and the replication's
seed. Its folder is ``runs/KEY`` in the plan folder, KEY a hash of the job's overrides and the
Fleetcast version, and holds what a finished simulation leaves there: ``config.yaml`` (the
resolved config) and ``summary.json`` (written last). A job whose folder already holds a
finished simulation of the same resolved config returns that summary without simulating (the
sweep's resume rule, ``sim.sweeps.resume``): a rerun into the same plan folder resumes, and a
changed config default or catalog entry is simulated anew, never read back stale (a trace
file's content is not compared).

The jobs go out in rounds (``sim.plan.rounds``) through a launcher: Hydra's, for
``fleetcast plan`` (``hydra_plugins/fleetcast_sweeper/plan_sweeper.py``, where each job runs
``simulate_job`` in Hydra's task), or ``LocalLauncher`` (the Python API: local processes).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import os
import signal
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sim
from sim.config.compose import compose_config
from sim.errors import ConfigError
from sim.output.run_files import CONFIG_FILE, SUMMARY_FILE, RunFolder, config_text, to_json
from sim.plan import INTERRUPTED_STATUS
from sim.plan.rounds import Rounds
from sim.run import simulate
from sim.sweeps.resume import job_status

RUNS_FOLDER = "runs"


@dataclass(frozen=True)
class Job:
    """One simulation of a plan, by its overrides."""

    overrides: tuple[str, ...]

    @property
    def key(self) -> str:
        # this Fleetcast's version too: another version's summary is never read back
        identity = json.dumps([list(self.overrides), sim.__version__])
        return hashlib.sha256(identity.encode()).hexdigest()[:24]

    def folder(self, plan_folder: Path) -> Path:
        return plan_folder / RUNS_FOLDER / self.key


class RefusedRun(Exception):
    """A simulation its config does not allow (a combination the catalog cannot run)."""


def simulate_job(cfg: dict[str, Any], job_dir: Path) -> dict[str, Any]:
    """Simulate ``cfg`` into ``job_dir`` (the summary read back when the folder already holds
    it): ``{"summary": ...}``, or ``{"error": the one-line reason}`` for a config a run
    refuses. What a launcher's job runs (in its process, or on a Ray worker). A config with
    an ``output_dir`` is simulated into that folder instead, with all its files (a worker on
    another machine then needs the folder on a shared disk)."""
    run_dir = cfg.get("output_dir")
    if run_dir is not None:
        # a whole run folder asked for (a day plan's answers): every file of the run there
        job_dir = Path(run_dir)
    if job_status(job_dir, cfg) == "complete":
        try:
            return {"summary": json.loads((job_dir / SUMMARY_FILE).read_text())}
        except (OSError, ValueError):
            pass  # unreadable: simulated again
    # the config as composed: what the next job_status compares (a run's own config.yaml
    # also records what it derived, such as a model=hf entry's fields)
    text = config_text(cfg)
    try:
        if run_dir is not None:
            simulate(cfg, output_dir=job_dir)
            return {"summary": json.loads((job_dir / SUMMARY_FILE).read_text())}
        result = simulate(cfg)
    except ConfigError as err:
        return {"error": str(err)}
    folder = RunFolder(job_dir)  # (locked, an older run's files removed first)
    try:
        folder.write(CONFIG_FILE, text)
        text = to_json(result.summary)
        folder.write(SUMMARY_FILE, text)
    finally:
        folder.close()
    # the summary as a reader of summary.json sees it (NaN written as null)
    return {"summary": json.loads(text)}


def _local_job(overrides: tuple[str, ...], job_dir: Path) -> dict[str, Any]:
    try:
        cfg = compose_config(list(overrides))
    except ConfigError as err:
        return {"error": str(err)}
    return simulate_job(cfg, job_dir)


class LocalLauncher:
    """Runs a round's jobs in ``jobs`` local processes (in this one for ``jobs=1``). A
    context manager: the processes start on entry, before any search thread does (forking a
    process with threads running is unsafe), and stop on exit."""

    def __init__(self, plan_folder: Path, jobs: int) -> None:
        self.plan_folder = plan_folder
        self.jobs = jobs
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> LocalLauncher:
        if self.jobs > 1:
            self._pool = ProcessPoolExecutor(self.jobs)
            # a fork-started pool starts every worker at its first task
            self._pool.submit(int).result()
        return self

    def __call__(self, batch: list[Job]) -> list[dict[str, Any]]:
        folders = [job.folder(self.plan_folder) for job in batch]
        if self._pool is None:
            return [_local_job(j.overrides, f) for j, f in zip(batch, folders, strict=True)]
        return list(self._pool.map(_local_job, [j.overrides for j in batch], folders))

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)


def interrupted(plan_folder: Path) -> int:
    """After Ctrl-C: kill this process's worker processes (a launcher's: joblib's, a
    ``LocalLauncher``'s pool), whose simulations would otherwise run on, say in one line what
    stopped and how to go on, and return ``INTERRUPTED_STATUS``. The simulations that finished
    are kept in ``runs/`` (each written whole, config then summary), so a rerun into the same
    folder resumes from them."""
    for child in multiprocessing.active_children():
        if child.pid is not None:  # (os.kill: a loky worker's Process has no kill())
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)
    print(
        f"interrupted: the plan in {plan_folder} stopped; its finished simulations are kept, "
        f"and the same command (plan.output_dir={plan_folder}) resumes from them",
        file=sys.stderr,
        flush=True,
    )
    return INTERRUPTED_STATUS


class Simulations:
    """The summaries of a plan's simulations, asked for from a search thread and run in the
    rounds (``sim.plan.rounds``)."""

    def __init__(self, base: list[str], seed: int, rounds: Rounds[Job]) -> None:
        self.base = base
        self.seed = seed
        self.rounds = rounds

    def overrides(self, candidate: list[str], replicas: int, replication: int) -> list[str]:
        return [
            *self.base,
            *candidate,
            f"fleet.replicas={replicas}",
            f"seed={self.seed + replication}",
            "sim.progress=false",
            "output_dir=null",
        ]

    def summaries(
        self, candidate: list[str], replicas: int, replications: list[int]
    ) -> list[dict[str, Any]]:
        """The summaries of these replications of a point (RefusedRun if its config is
        refused)."""
        jobs = [Job(tuple(self.overrides(candidate, replicas, r))) for r in replications]
        results = self.rounds.ask(jobs)
        for result in results:
            if "error" in result:
                raise RefusedRun(result["error"])
        return [result["summary"] for result in results]

    def summary(self, candidate: list[str], replicas: int, replication: int) -> dict[str, Any]:
        return self.summaries(candidate, replicas, [replication])[0]
