"""The runs ``fleetcast calibrate --bench`` fits on: each measured run of the user's benchmark
files, composed into the config that replays it as its harness ran it, with the figures it is
scored on.

- ``prepare``: every run of every file (its harness's load and lengths from
  ``sim.harness.replay``, its engine's scheduler unless the overrides choose one, the shared
  then the file's own overrides), and which runs are held out (every ``holdout_every``-th in
  the order given; with two runs the second);
- ``targets``: what a run is scored on: its mean TTFT and TPOT (the median where the file keeps
  no mean; ITL, then chunk gaps, where it keeps no TPOT), in the file's own definitions;
- ``simulated_figures`` / ``measured_figures`` / ``errors``: a simulation's figures in those
  definitions, and the error against the measured ones.

The fit itself is ``sim.calibration.bench_fit``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sim.calibration.fitting import sha256
from sim.config.compose import check_overrides, compose_config
from sim.config.schema import validate_run
from sim.engine.step_time.bench_profile import TERMS
from sim.errors import ConfigError, require
from sim.harness.formats import read_benchmark
from sim.harness.replay import HarnessLoad, harness_load
from sim.harness.results import MeasuredRun, Statistic
from sim.harness.simulated import (
    SimulatedRequests,
    mean,
    output_tokens_per_s,
    per_request,
    percentile,
)
from sim.resources import is_shipped, shipped_path

METRICS = ("ttft", "tpot")  # fitted
REPORTED = (*METRICS, "output_throughput")  # reported
DEFAULT_HOLDOUT_EVERY = 3


@dataclass
class BenchRun:
    """One measured run, ready to simulate."""

    measured: MeasuredRun
    source: str  # the file as the user named it
    sha256: str
    index: int  # the run's place in its file
    overrides: list[str]
    cfg: dict[str, Any]
    load: HarnessLoad
    tp: int
    held_out: bool = False
    targets: dict[str, tuple[Statistic, str, float]] = field(default_factory=dict)


def targets(run: MeasuredRun) -> dict[str, tuple[Statistic, str, float]]:
    """metric -> (the file's statistic, ``mean`` or ``median``, measured seconds): the mean
    where the file keeps one, else the median; TPOT falls back on ITL, then chunk gaps."""
    out = {}
    for metric, roles in (("ttft", ("ttft",)), ("tpot", ("tpot", "itl", "chunk_gap"))):
        for role in roles:
            stat = run.latency.get(role)
            if stat is None:
                continue
            if stat.mean_s:
                out[metric] = (stat, "mean", stat.mean_s)
                break
            if stat.median_s:
                out[metric] = (stat, "median", stat.median_s)
                break
    return out


def simulated_figures(sim: SimulatedRequests, run: BenchRun) -> dict[str, float | None]:
    """The run's target figures from a simulation, in the measured statistics' definitions."""
    out: dict[str, float | None] = {}
    for metric, (stat, kind, _) in run.targets.items():
        values, weights = per_request(sim, stat.definition)
        out[metric] = mean(values, weights) if kind == "mean" else percentile(values, weights, 50)
    out["output_throughput"] = output_tokens_per_s(sim)
    return out


def measured_figures(run: BenchRun) -> dict[str, float | None]:
    out: dict[str, float | None] = {m: value for m, (_, _, value) in run.targets.items()}
    out["output_throughput"] = run.measured.output_throughput_tokens_per_s
    return out


def prepare(
    files: Sequence[tuple[str, Sequence[str]]],
    overrides: Sequence[str],
    folder: Path,
    holdout_every: int = DEFAULT_HOLDOUT_EVERY,
) -> list[BenchRun]:
    """Every run of every file, composed with the shared ``overrides`` then the file's own,
    its harness's load and scheduler (unless the overrides choose one), and its split."""

    require(holdout_every >= 0, "calibrate.holdout_every", holdout_every, "must be >= 0")
    require(
        holdout_every != 1,
        "calibrate.holdout_every",
        holdout_every,
        "holds out every run, leaving none to fit: give 2 or more, or 0 for none",
    )
    require(bool(files), "calibrate.bench", "", "no benchmark file given")
    runs: list[BenchRun] = []
    for number, (name, own) in enumerate(files):
        given = [*overrides, *own]
        try:
            runs += _prepare_file(name, given, folder / f"file{number}")
        except ConfigError as err:  # say which file it was about
            raise ConfigError(err.field, err.value, f"{err.reason} (--bench {name})") from None
    if holdout_every and len(runs) >= 2:
        every = min(holdout_every, len(runs))
        for position, run in enumerate(runs, start=1):
            run.held_out = position % every == 0
    return runs


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def _prepare_file(name: str, given: list[str], folder: Path) -> list[BenchRun]:
    """The runs of one benchmark file under the overrides ``given`` (module docstring)."""
    measured_runs = read_benchmark(name)  # a file that is not one: said first
    check_overrides(given)
    keys = [_key(o) for o in given]
    for needed in ("model", "hardware"):
        require(
            needed in keys,
            needed,
            None,
            "say what ran the benchmark (the files do not name the catalog's model and GPU): "
            f"give {needed}= (and fleet.tp=, precision.* where they are not the defaults)",
        )
    for key, override in zip(keys, given, strict=True):
        require(
            not key.startswith("workload"),
            key,
            override.split("=", 1)[-1],
            "the benchmark file says what the client sent; calibrate --bench replays it",
        )
        require(
            not (key.startswith("step_time.") and key.removeprefix("step_time.") in TERMS),
            key,
            override.split("=", 1)[-1],
            "calibrate --bench fits this term from the roofline's default; leave it out",
        )
    folder.mkdir(parents=True, exist_ok=True)
    path = shipped_path(name) if is_shipped(name) else Path(name).expanduser()
    digest = sha256(path)
    runs = []
    for index, measured in enumerate(measured_runs):
        load = harness_load(measured)
        chosen = "scheduler" in keys
        scheduler = [] if chosen or load.scheduler is None else [f"scheduler={load.scheduler}"]
        cfg = compose_config(
            ["step_time=roofline", "fleet.replicas=1", "sim.progress=false", *scheduler, *given]
        )
        if not str(cfg["step_time"].get("_target_", "")).endswith("RooflineStepTime"):
            raise ConfigError(
                "step_time",
                cfg["step_time"].get("_target_"),
                "calibrate --bench fits the roofline's terms: leave step_time at roofline",
            )
        require(
            cfg["step_time"].get("profile") is None,
            "step_time.profile",
            cfg["step_time"].get("profile"),
            "calibrate --bench fits from the defaults: give no profile",
        )
        cfg["workload"] = load.workload(folder, f"run{index}")
        if load.window_s is not None:
            cfg["sim"]["horizon_s"] = load.window_s
        spec = validate_run(cfg)  # every value checked before any simulation
        found = targets(measured)
        if not found:
            raise ConfigError(
                "bench_file", name, f"{measured.label}: holds neither TTFT nor TPOT/ITL"
            )
        runs.append(
            BenchRun(
                measured=measured,
                source=name,
                sha256=digest,
                index=index,
                overrides=[*scheduler, *given],
                cfg=cfg,
                load=load,
                tp=spec.fleet.tp,
                targets=found,
            )
        )
    return runs


def errors(
    runs: Sequence[BenchRun], figures: Sequence[dict[str, float | None]]
) -> dict[str, dict[str, float]]:
    """metric -> {mape, median_ape, max_ape, runs} over the runs that have the metric."""
    out = {}
    for metric in REPORTED:
        ape = []
        for run, simulated in zip(runs, figures, strict=True):
            measured = measured_figures(run).get(metric)
            value = simulated.get(metric)
            if measured and value is not None:
                ape.append(abs(value / measured - 1))
        if ape:
            out[metric] = {
                "mape": float(np.mean(ape)),
                "median_ape": float(np.median(ape)),
                "max_ape": float(np.max(ape)),
                "runs": len(ape),
            }
    return out
