"""Fit the roofline to the user's own serving benchmarks: ``fleetcast calibrate --bench``.

Each run of each benchmark file (``sim.calibration.bench_runs``) is simulated as its harness
ran it (``sim.harness.replay``: the client, the load, the lengths, the engine's scheduler) on
the deployment the overrides name, and its mean TTFT and mean TPOT (the median where the file
keeps no mean; ITL where it keeps no TPOT) are computed in the harness's own definitions
(``sim.harness.simulated``).
A few global terms of the roofline are then moved to bring the simulated figures to the
measured ones.

The model's form was chosen before scoring it on any run:

- terms: ``compute_scale`` (multiplies the three compute efficiencies), ``bandwidth_scale``
  (the two bandwidth efficiencies), ``step_overhead_s``, ``token_overhead_s`` (the host's cost
  per token produced in a step), ``request_overhead_s`` (the server's fixed time per request
  before the engine queues it: HTTP, tokenising) and, only when the fitted runs use two or
  more TP degrees, ``allreduce_scale`` (the all-reduce's bandwidth efficiency: TP scaling). An
  efficiency is capped at 1 whatever its scale.
- objective: a soft-L1 loss (``2(sqrt(1 + z^2) - 1)``, quadratic near 0, linear far out, so one
  run the model cannot follow, such as an overloaded engine's, does not drag the rest) of
  ``z`` = the log error of TTFT and of TPOT over 0.1 (a 10% error is one unit), summed over
  the fitted runs, plus a prior that keeps each term near the roofline's default unless the
  runs say otherwise: log scales with standard deviation 0.5 (compute, all-reduce) and 0.3
  (bandwidth, which datasheets pin better), log step overhead 1.5 around the default, token
  overhead 25 us and request overhead 30 ms above the default. With one or two runs the prior
  does most of the work, which is the point: two figures cannot pin six terms.
- search: Nelder-Mead within bounds on the log scales, the log step overhead and the square
  roots of the added token (us) and request (ms) overheads (no edge at 0 to stall on), from
  the defaults, up to ``max_evals`` simulations of every fitted run. Every evaluation uses the
  same seed (common random numbers), so the objective moves only with the terms.
- held out: every ``holdout_every``-th run in the order given (default every third; with two
  runs the second) is simulated with the fitted terms but never seen by the fit, and its error
  is reported beside the fitted runs'. One run leaves nothing to hold out: said, not hidden.
  The held-out runs' measured / calibrated mean TPOT is the profile's own step-time error band
  (``provenance["model_error"]``, ``sim.output.model_error``), which a plan with the profile
  answers with instead of the shipped validation bands.

The profile keeps the terms fitted on the fitted runs only, so its held-out error describes the
file a user gets. A term the fit leaves at a bound of its range, or an efficiency capped at 1,
is named in the profile's ``provenance["at_bounds"]`` with what it suggests
(``BOUND_MEANINGS``): the form is then absorbing a mismatch of the load model or the deployment.
"""

from __future__ import annotations

import math
import sys
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from sim.calibration.bench_runs import (
    DEFAULT_HOLDOUT_EVERY,
    METRICS,
    BenchRun,
    errors,
    measured_figures,
    prepare,
    simulated_figures,
)
from sim.catalog.placement import build_placement
from sim.config.schema import validate_run
from sim.engine.step_time.bench_profile import TERMS, BenchProfile, deployment_key
from sim.errors import ConfigError, require
from sim.harness.simulated import (
    from_table,
)
from sim.output.model_error import deployment_class, held_out_band
from sim.run import simulate

OBSERVATION_SIGMA = 0.1  # log error that counts as one unit of the objective
# each searched scale and the efficiencies it multiplies (each capped at 1)
SCALED: dict[str, tuple[str, ...]] = {
    "compute_scale": (
        "compute_efficiency",
        "quantized_compute_efficiency",
        "attention_compute_efficiency",
    ),
    "bandwidth_scale": ("bandwidth_efficiency", "attention_bandwidth_efficiency"),
    "allreduce_scale": ("allreduce_bandwidth_efficiency",),
}
DEFAULT_MAX_EVALS = 80
# A searched value within this share of its range from an end of it sits at that bound: the
# search clips to the bounds, so a term it pushed past one stays exactly there.
AT_BOUND_SHARE = 0.01
# What a term at each end of its range says: the runs want more (or less) of it than the form
# allows, so the fit is absorbing something the model gets wrong elsewhere. A scale's upper
# bound is any of its efficiencies at 1 (capped there: the scale may go on, that one cannot).
# (An added overhead's lower end is its default, where a fit that needs none rests: not
# reported.)
BOUND_MEANINGS: dict[str, dict[str, str]] = {
    "compute_scale": {
        "upper": "a compute efficiency at 1: even at peak compute the simulated prefills are "
        "slower than measured; the load model likely queues more work per step than the "
        "server did (clients in lock-step, a token budget or prefill limit unlike the "
        "server's, a prefix cache the runs had)",
        "lower": "compute efficiencies at the bottom of their range: something other than "
        "compute slows the measured prefills (harness or host time per request, another TP "
        "degree or precision than simulated)",
    },
    "bandwidth_scale": {
        "upper": "a bandwidth efficiency at 1: decode is faster than the GPU's memory can "
        "stream the simulated weights and KV (check the model, precision and TP of the runs; "
        "speculative decoding)",
        "lower": "bandwidth efficiencies at the bottom of their range: decode slower than "
        "memory-bound (host-bound streaming, overloaded runs, a larger batch than simulated)",
    },
    "step_overhead_s": {
        "upper": "the most fixed time per step the fit allows: the runs' slowness is not "
        "per step (per request or per token: harness or host time)",
        "lower": "no fixed time per step left: the other terms already make steps too slow",
    },
    "token_overhead_s": {
        "upper": "the most time per token and step the fit allows: the host, not the GPU, "
        "sets the pace (give frontend.token_s) or the runs are overloaded",
    },
    "request_overhead_s": {
        "upper": "the most time per request the fit allows: requests wait in the runs for "
        "something the load model does not have (the harness's queue, a warm-up, a cap on "
        "requests in flight)",
    },
    "allreduce_scale": {
        "upper": "all-reduce efficiency at 1: TP scales better than the interconnect allows "
        "(check the runs' TP degrees)",
        "lower": "all-reduce efficiency at the bottom of its range: TP scales worse than the "
        "all-reduce explains (per-GPU GEMMs less efficient at high TP)",
    },
}


@dataclass(frozen=True)
class Parameter:
    """One fitted term, searched on an internal scale ``x``: the log of a scale or of the step
    overhead, or (``squared``) the square root of an added overhead, so that the search has no
    edge at 0 to stall on (a simplex squeezed against a bound stops moving)."""

    name: str
    prior_mean: float  # of the value: x, or x**2 when squared
    prior_sd: float
    low: float  # bounds of x
    high: float
    step: float  # the initial simplex's step in x
    squared: bool = False

    def value(self, x: float) -> float:
        return x * x if self.squared else x

    def prior(self, x: float) -> float:
        return ((self.value(x) - self.prior_mean) / self.prior_sd) ** 2

    def bound_reached(self, x: float) -> str | None:
        """``"upper"`` or ``"lower"`` when ``x`` sits at that end of the term's range (for an
        added overhead, x**2, only its maximum counts: its minimum is the default)."""
        near = AT_BOUND_SHARE * (self.high - self.low)
        if self.squared:
            return "upper" if min(x - self.low, self.high - x) <= near else None
        if self.high - x <= near:
            return "upper"
        return "lower" if x - self.low <= near else None


def at_bounds(
    x: Sequence[float] | np.ndarray, params: list[Parameter], base: dict[str, Any]
) -> list[dict[str, Any]]:
    """The searched terms that ``x`` leaves at a bound: each with the bound, its searched
    value (a scale, or an added overhead in us or ms), the roofline keys it sets there and
    what it suggests (``BOUND_MEANINGS``)."""
    terms = terms_at(x, params, base)
    found = []
    for xi, param in zip(x, params, strict=True):
        bound = param.bound_reached(float(xi))
        keys = SCALED.get(param.name, (param.name,))
        if param.name in SCALED and bound != "lower":
            at_one = tuple(key for key in keys if terms[key] >= 1.0)
            bound, keys = ("upper", at_one) if at_one else (None, keys)
        if bound is None:
            continue
        value = param.value(float(xi))
        found.append(
            {
                "term": param.name,
                "bound": bound,
                "searched_value": math.exp(value) if param.name in SCALED else value,
                "terms": {key: terms[key] for key in keys},
                "meaning": BOUND_MEANINGS[param.name][bound],
            }
        )
    return found


def parameters(base: dict[str, Any], fit_tp: bool) -> list[Parameter]:
    """The searched terms (module docstring); the scale bounds let every efficiency reach 1."""
    ceiling = {scale: 1.0 / min(base[key] for key in keys) for scale, keys in SCALED.items()}
    overhead = max(base["step_overhead_s"], 1e-5)
    params = [
        Parameter(
            "compute_scale", 0.0, 0.5, math.log(0.2), math.log(ceiling["compute_scale"]), 0.3
        ),
        Parameter(
            "bandwidth_scale", 0.0, 0.3, math.log(0.2), math.log(ceiling["bandwidth_scale"]), 0.2
        ),
        Parameter(
            "step_overhead_s",
            0.0,
            1.5,
            math.log(1e-5 / overhead),
            math.log(0.1 / overhead),
            0.7,
        ),
        # added to the default, in microseconds and milliseconds: x**2, x in [-sqrt, sqrt]
        Parameter("token_overhead_s", 0.0, 25.0, -math.sqrt(200), math.sqrt(200), 3.0, True),
        Parameter("request_overhead_s", 0.0, 30.0, -math.sqrt(2000), math.sqrt(2000), 3.0, True),
    ]
    if fit_tp:
        params.append(
            Parameter(
                "allreduce_scale",
                0.0,
                0.5,
                math.log(0.1),
                math.log(ceiling["allreduce_scale"]),
                0.3,
            )
        )
    return params


def terms_at(
    x: Sequence[float] | np.ndarray, params: list[Parameter], base: dict[str, Any]
) -> dict[str, float]:
    """The roofline keys the searched values ``x`` stand for."""
    value = {p.name: p.value(float(xi)) for p, xi in zip(params, x, strict=True)}
    terms: dict[str, float] = {}
    for scale, keys in SCALED.items():
        if scale in value:
            for key in keys:
                terms[key] = min(1.0, base[key] * math.exp(value[scale]))
    terms["step_overhead_s"] = max(base["step_overhead_s"], 1e-5) * math.exp(
        value["step_overhead_s"]
    )
    terms["token_overhead_s"] = base["token_overhead_s"] + value["token_overhead_s"] * 1e-6
    terms["request_overhead_s"] = base["request_overhead_s"] + value["request_overhead_s"] * 1e-3
    return terms


def _simulate(cfg: dict[str, Any], terms: dict[str, float]) -> tuple[Any, dict]:
    cfg = {**cfg, "step_time": {**cfg["step_time"], **terms}}
    result = simulate(cfg)
    return result.requests, result.summary


def _figures_of(job: tuple[BenchRun, dict[str, float]]) -> dict[str, float | None]:
    run, terms = job
    try:
        table, summary = _simulate(run.cfg, terms)
        return simulated_figures(from_table(table, summary, run.measured.label), run)
    except ConfigError as err:  # say which benchmark run it was about
        where = f"--bench {run.source}, {run.measured.label}"
        raise ConfigError(err.field, err.value, f"{err.reason} ({where})") from None


@dataclass
class FitResult:
    profile: BenchProfile
    base: dict[str, float]
    evaluations: int
    default_figures: list[dict[str, float | None]]
    fitted_figures: list[dict[str, float | None]]


class _Evaluator:
    """Simulates runs under given terms, in parallel when ``jobs`` > 1."""

    def __init__(self, jobs: int) -> None:
        self.pool = ProcessPoolExecutor(jobs) if jobs > 1 else None

    def __call__(
        self, runs: Sequence[BenchRun], terms: dict[str, float]
    ) -> list[dict[str, float | None]]:
        jobs = [(run, terms) for run in runs]
        if self.pool is None:
            return [_figures_of(job) for job in jobs]
        return list(self.pool.map(_figures_of, jobs))

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()


def simulate_runs(
    runs: Sequence[BenchRun], terms: dict[str, float], jobs: int = 1
) -> list[dict[str, float | None]]:
    """Each run's figures (``simulated_figures``) simulated under ``terms``."""
    evaluate = _Evaluator(min(jobs, len(runs)))
    try:
        return evaluate(runs, terms)
    finally:
        evaluate.close()


def fit(
    runs: list[BenchRun],
    *,
    max_evals: int = DEFAULT_MAX_EVALS,
    jobs: int = 1,
    on_evaluation: Callable[[int, float], None] | None = None,
) -> FitResult:
    """The terms that bring the fitted runs' TTFT and TPOT nearest the measured ones."""
    # imported here: SciPy, the calibrate extra (~260 ms of CPU)
    from scipy.optimize import minimize

    require(max_evals >= 1, "calibrate.max_evals", max_evals, "must be >= 1")
    fitted_runs = [r for r in runs if not r.held_out]
    assert fitted_runs, "prepare holds out at most every other run"
    base_cfg = fitted_runs[0].cfg["step_time"]
    base = {key: float(base_cfg[key]) for key in TERMS}
    fit_tp = len({r.tp for r in fitted_runs}) >= 2
    params = parameters(base, fit_tp)
    x0 = np.zeros(len(params))  # every term at its default
    evaluate = _Evaluator(min(jobs, len(runs)))
    count = 0

    def objective(x: np.ndarray) -> float:
        nonlocal count
        x = np.clip(x, [p.low for p in params], [p.high for p in params])
        figures = evaluate(fitted_runs, terms_at(x, params, base))
        loss = 0.0
        for run, simulated in zip(fitted_runs, figures, strict=True):
            for metric in METRICS:
                measured = measured_figures(run).get(metric)
                value = simulated.get(metric)
                if measured and value:
                    z = math.log(value / measured) / OBSERVATION_SIGMA
                    loss += 2.0 * (math.sqrt(1.0 + z * z) - 1.0)  # soft L1
        loss += sum(p.prior(float(xi)) for xi, p in zip(x, params, strict=True))
        count += 1
        if on_evaluation is not None:
            on_evaluation(count, loss)
        return loss

    try:
        simplex = np.array(
            [x0] + [x0 + np.eye(len(params))[i] * p.step for i, p in enumerate(params)]
        )
        result = minimize(
            objective,
            x0,
            method="Nelder-Mead",
            bounds=[(p.low, p.high) for p in params],
            options={
                "maxfev": max_evals,
                "initial_simplex": simplex,
                "xatol": 0.01,
                "fatol": 0.01,
            },
        )
        best_x = np.clip(result.x, [p.low for p in params], [p.high for p in params])
        best = terms_at(best_x, params, base)
        default_figures = evaluate(runs, {})
        fitted_figures = evaluate(runs, best)
    finally:
        evaluate.close()
    split = {
        "fit": [i for i, r in enumerate(runs) if not r.held_out],
        "held_out": [i for i, r in enumerate(runs) if r.held_out],
    }
    error: dict[str, Any] = {}
    for part, indices in split.items():
        if not indices:
            continue
        chosen = [runs[i] for i in indices]
        error[part] = {
            "default": errors(chosen, [default_figures[i] for i in indices]),
            "calibrated": errors(chosen, [fitted_figures[i] for i in indices]),
        }
    records = [
        _run_record(run, default_figures[i], fitted_figures[i]) for i, run in enumerate(runs)
    ]
    klass = _bench_class(fitted_runs[0])
    band = held_out_band(records, "this profile's held-out runs", klass)
    profile = BenchProfile(
        terms=best,
        fitted_for=_deployments(fitted_runs),
        fitted=sorted(best),
        runs=records,
        error=error,
        provenance={
            "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "method": "Nelder-Mead on log errors of TTFT and TPOT with a prior at the "
            "roofline's defaults (sim/calibration/bench_fit.py)",
            "evaluations": count,
            "tp_scaling_fitted": fit_tp,
            "seed": int(fitted_runs[0].cfg.get("seed", 0)),
            # terms the fit left at a bound of their range, and what that suggests
            "at_bounds": at_bounds(best_x, params, base),
            # the step-time error band of the held-out runs (measured / calibrated TPOT): a
            # plan with this profile answers with it (sim.output.model_error); None: none held
            "model_error": None if band is None else {"class": klass, **band.json()},
        },
    )
    return FitResult(profile, base, count, default_figures, fitted_figures)


def _bench_class(run: BenchRun) -> dict[str, str]:
    """The class of deployment of a fitted run, its step-time model the bench profile."""
    return {**deployment_class(run.cfg), "step_time_model": "bench_profile"}


def _deployments(runs: Sequence[BenchRun]) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for run in runs:
        spec = validate_run(run.cfg)
        key = deployment_key(build_placement(spec, spec.placement, 1).deployments[0])
        if key not in out:
            out.append(key)
    return out


def _run_record(
    run: BenchRun, default: dict[str, float | None], fitted: dict[str, float | None]
) -> dict[str, Any]:
    load = run.load
    return {
        "file": run.source,
        "sha256": run.sha256,
        "index": run.index,
        "label": run.measured.label,
        "tool": run.measured.tool,
        "held_out": run.held_out,
        "overrides": run.overrides,
        "load": {
            "num_requests": load.num_requests,
            "request_rate": load.request_rate,
            "max_concurrency": load.max_concurrency,
            "num_warmups": load.num_warmups,
            "lengths": load.lengths,
        },
        "statistics": {m: f"{kind} {stat.name}" for m, (stat, kind, _) in run.targets.items()},
        "measured": measured_figures(run),
        "default": default,
        "calibrated": fitted,
    }


def calibrate_bench(
    files: Sequence[tuple[str, Sequence[str]]],
    overrides: Sequence[str],
    *,
    holdout_every: int = DEFAULT_HOLDOUT_EVERY,
    max_evals: int = DEFAULT_MAX_EVALS,
    jobs: int = 1,
    progress: bool = True,
) -> tuple[FitResult, list[BenchRun]]:
    """Read, simulate and fit (module docstring); the per-request lengths live in a temporary
    folder for the fit's duration."""
    with tempfile.TemporaryDirectory(prefix="fleetcast-bench-") as tmp:
        runs = prepare(files, overrides, Path(tmp), holdout_every)
        bar = None
        if progress:
            bar = tqdm(total=max_evals, desc="fitting", unit="sim", file=sys.stderr, leave=False)

        def tick(count: int, loss: float) -> None:
            if bar is not None:
                bar.set_postfix_str(f"objective {loss:.3g}")
                bar.update(1)

        try:
            result = fit(runs, max_evals=max_evals, jobs=jobs, on_evaluation=tick)
        finally:
            if bar is not None:
                bar.close()
    return result, runs
