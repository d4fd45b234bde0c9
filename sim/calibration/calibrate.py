"""``fleetcast calibrate``: fit a step-time profile and write it where it cannot clobber one.

    fleetcast calibrate --steps FILE [overrides] [--backend B] [--out PATH] [--force]
    fleetcast calibrate --kernels DIR --c0 S [--allreduce-latency S] [--tp-exponent X] ...
    fleetcast calibrate [overrides] --bench FILE [overrides] [--bench FILE ...] --out PATH

The overrides (``model=``, ``hardware=``, ``precision.weights=``, ``precision.kv=``) say what
the profile is for. ``--steps`` fits a per-step CSV (``sim.calibration.step_fit``), ``--kernels``
builds from kernel tables (``sim.calibration.kernels``); both write a profile for
``step_time=calibrated``. ``--bench`` fits the roofline's global terms to measured serving
benchmarks (``sim.calibration.bench_fit``; overrides right after a file apply to that file's
runs only, e.g. its ``fleet.tp``; several files may share one ``--bench`` and its overrides)
and writes a profile for ``step_time.profile=PATH`` with the
default roofline. Without ``--out`` the profile goes to the current directory under its
canonical name; an existing file is replaced only with ``--force``, and a shipped profile
never.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from sim.calibration.kernels import calibrate_kernels
from sim.calibration.step_fit import STEP_COLUMNS, calibrate_steps
from sim.catalog.hardware import GPU
from sim.catalog.model import ModelSpec
from sim.config.compose import check_overrides, compose_config
from sim.engine.step_time.profile import Profile, profile_file_name, shipped_profile_dir
from sim.errors import ConfigError, require

# The per-step engine overhead the shipped kernel profiles carry, fitted on 89 measured serving
# runs by benchmarks/fidelity.py --fit (docs/explanation/fidelity.md); named here only to
# tell a user what a sensible --c0 is.
SHIPPED_C0_S = 0.001


def main(argv: list[str]) -> int:
    """``fleetcast calibrate (--steps FILE | --kernels DIR) [overrides] [--out PATH]``."""
    parser = argparse.ArgumentParser(
        prog="fleetcast calibrate",
        description="Fit a step-time profile from a per-step CSV or from kernel tables. Give "
        "model=, hardware=, precision.weights=, precision.kv= as overrides.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--steps", help="per-step CSV (columns: " + ", ".join(STEP_COLUMNS) + ")")
    source.add_argument(
        "--bench",
        nargs="+",
        action="append",
        metavar="FILE [OVERRIDE",
        help="serving benchmark result files (vLLM bench serve JSON, SGLang bench_serving "
        "JSONL, GuideLLM report, AIPerf profile_export_aiperf.json), then overrides for their "
        "runs only (fleet.tp=4 ...); repeat --bench for files with other overrides. Fits the "
        "roofline's terms",
    )
    source.add_argument(
        "--kernels",
        metavar="DIR",
        help="folder of kernel tables; shipped:calibration is the one Fleetcast "
        "ships (aiconfigurator's, data/calibration/)",
    )
    parser.add_argument("--backend", default="vllm", choices=("vllm", "trtllm"))
    parser.add_argument(
        "--c0",
        type=float,
        default=None,
        help="per-step engine overhead in seconds, not in any kernel table "
        f"(required with --kernels; the shipped profiles use {SHIPPED_C0_S:g}, fitted "
        "by benchmarks/fidelity.py --fit)",
    )
    parser.add_argument(
        "--allreduce-latency",
        type=float,
        default=None,
        help="seconds per tensor-parallel all-reduce (kernel profiles only; "
        "default: the GPU catalog's interconnect latency)",
    )
    parser.add_argument(
        "--tp-exponent",
        type=float,
        default=1.0,
        help="per-token work on tp GPUs takes 1/tp**this of its TP-1 time "
        "(kernel profiles only; default 1: ideal scaling)",
    )
    parser.add_argument(
        "--holdout-every",
        type=int,
        default=None,
        help="--bench: hold out every Nth run from the fit and report its error "
        "(default 3; 0: hold none out)",
    )
    parser.add_argument(
        "--max-evals",
        type=int,
        default=None,
        help="--bench: simulations of the fitted runs the search may spend (default 80)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="--bench: runs simulated in parallel (default: the CPU count; never more than "
        "the runs)",
    )
    parser.add_argument(
        "--out", help="where to write the profile (default: ./<name>.json in the current directory)"
    )
    parser.add_argument(
        "--force", action="store_true", help="replace the file at --out if there is one"
    )
    args, overrides = parser.parse_known_args(argv)
    if args.bench:
        return _bench_main(args, overrides)
    for flag in ("holdout_every", "max_evals", "jobs"):
        if getattr(args, flag) is not None:
            print(f"error: --{flag.replace('_', '-')} goes with --bench", file=sys.stderr)
            return 2
    try:
        deployment = _deployment_parts(overrides)
        model, gpu, weights, kv = deployment
        name = profile_file_name(model.name, gpu.name, weights, kv, args.backend)
        out = Path(args.out) if args.out else Path.cwd() / name
        _check_out(out, args.force)
        profile = _calibrate(args, *deployment)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        profile.save(out)
    except OSError as err:
        print(f"error: calibrate.out={str(out)!r}: cannot write: {err.strerror}", file=sys.stderr)
        return 2
    print(f"profile: {out}   (use it with step_time=calibrated step_time.profile={out})")
    for part, held_out in profile.holdout_error.items():
        print(
            f"  held-out error, {part:<18} MAPE {held_out['mape']:6.2%}  "
            f"median {held_out['median_ape']:6.2%}  max {held_out['max_ape']:6.2%}  "
            f"({held_out['rows']} rows)"
        )
    if args.steps:  # what the fit could not tell from the steps
        for note in profile.modelled:
            print(f"  note: {note}")
    return 0


def _deployment_parts(overrides: list[str]) -> tuple[ModelSpec, GPU, str, str]:
    check_overrides(overrides)
    cfg = compose_config(overrides)
    return (
        ModelSpec.from_config(cfg["model"]),
        GPU.from_config(cfg["hardware"]),
        cfg["precision"]["weights"],
        cfg["precision"]["kv"],
    )


def _check_out(out: Path, force: bool) -> None:
    """Never overwrite a shipped profile; any other file only with --force."""
    shipped = shipped_profile_dir().resolve()
    require(
        out.resolve().parent != shipped,
        "calibrate.out",
        str(out),
        "is a profile Fleetcast ships; write yours elsewhere and give it with "
        "step_time.profile=PATH",
    )
    require(not out.is_dir(), "calibrate.out", str(out), "is a folder; name the profile's file")
    require(
        force or not out.exists(), "calibrate.out", str(out), "exists; use --force to replace it"
    )
    # the folder, or the nearest one above it that exists (save makes the rest)
    folder = out.expanduser().resolve().parent
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    require(
        existing.is_dir() and os.access(existing, os.W_OK),
        "calibrate.out",
        str(out),
        f"cannot write in {existing}",
    )


def _calibrate(
    args: argparse.Namespace, model: ModelSpec, gpu: GPU, weights: str, kv: str
) -> Profile:
    if args.steps:
        return calibrate_steps(
            args.steps,
            model=model,
            hardware=gpu.name,
            weights=weights,
            kv=kv,
            backend=args.backend,
        )
    require(
        args.c0 is not None,
        "calibrate.c0",
        args.c0,
        "required with --kernels: the per-step engine overhead in seconds (no kernel "
        f"table measures it; the shipped profiles use {SHIPPED_C0_S:g})",
    )
    require(args.c0 >= 0, "calibrate.c0", args.c0, "must be >= 0")
    require(
        args.allreduce_latency is None or args.allreduce_latency >= 0,
        "calibrate.allreduce_latency",
        args.allreduce_latency,
        "must be >= 0",
    )
    require(
        0 < args.tp_exponent <= 1, "calibrate.tp_exponent", args.tp_exponent, "must be in (0, 1]"
    )
    return calibrate_kernels(
        args.kernels,
        model=model,
        gpu=gpu,
        weights=weights,
        kv=kv,
        backend=args.backend,
        c0=args.c0,
        allreduce_latency_s=args.allreduce_latency,
        tp_compute_exponent=args.tp_exponent,
    )


def _is_override(word: str) -> bool:
    """In a ``--bench`` group: ``key=value``, ``+key=value`` or ``~key`` (unless a file of
    that name exists); every other word is a benchmark file."""
    if word.startswith(("+", "~")):
        return True
    return "=" in word and not Path(word).expanduser().is_file()


def _bench_main(args: argparse.Namespace, overrides: list[str]) -> int:
    """``--bench``: fit, write the profile, print the terms and the error before and after."""
    # imported here: the fit and the simulator (~75 ms of CPU more), for --bench only
    from sim.calibration.bench_fit import DEFAULT_MAX_EVALS, calibrate_bench
    from sim.calibration.bench_runs import DEFAULT_HOLDOUT_EVERY, REPORTED

    files = [
        (name, [word for word in group if _is_override(word)])
        for group in args.bench
        for name in group
        if not _is_override(name)
    ]
    empty = next((group for group in args.bench if all(map(_is_override, group))), None)
    if empty is not None:
        print(
            f"error: calibrate.bench={' '.join(empty)!r}: no benchmark file in this --bench "
            "(its words with = are overrides; name the file first)",
            file=sys.stderr,
        )
        return 2
    holdout_every = DEFAULT_HOLDOUT_EVERY if args.holdout_every is None else args.holdout_every
    max_evals = DEFAULT_MAX_EVALS if args.max_evals is None else args.max_evals
    try:
        require(holdout_every >= 0, "calibrate.holdout_every", holdout_every, "must be >= 0")
        require(max_evals >= 1, "calibrate.max_evals", max_evals, "must be >= 1")
        require(args.jobs is None or args.jobs >= 1, "calibrate.jobs", args.jobs, "must be >= 1")
        out = Path(args.out) if args.out else Path.cwd() / "bench_profile.json"
        _check_out(out, args.force)
        jobs = args.jobs or os.cpu_count() or 1
        result, runs = calibrate_bench(
            files,
            overrides,
            holdout_every=holdout_every,
            max_evals=max_evals,
            jobs=jobs,
            progress=sys.stderr.isatty(),
        )
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    profile = result.profile
    profile.provenance["command"] = "fleetcast calibrate " + " ".join(sys.argv[2:])
    try:
        profile.save(out)
    except OSError as err:
        print(f"error: calibrate.out={str(out)!r}: cannot write: {err.strerror}", file=sys.stderr)
        return 2
    held = sum(r.held_out for r in runs)
    print(
        f"profile: {out}   (use it with step_time.profile={out})\n"
        f"  fitted on {len(runs) - held} runs, {held} held out, "
        f"{result.evaluations} simulations of the fitted runs"
        + (
            ""
            if profile.provenance["tp_scaling_fitted"]
            else "; TP scaling kept at its default (the fitted runs use one TP degree)"
        )
    )
    print(f"  {'term':<32}{'default':>12}{'fitted':>12}")
    for name, value in profile.terms.items():
        print(f"  {name:<32}{result.base[name]:>12.4g}{value:>12.4g}")
    pinned = profile.provenance["at_bounds"]
    if pinned:
        print(
            "  at a bound of its range (the fitted form is absorbing a mismatch of the load "
            "model or the deployment; check those before trusting the profile):"
        )
        for entry in pinned:
            keys = ", ".join(f"{key} {value:.4g}" for key, value in entry["terms"].items())
            print(
                f"    {entry['term']} at its {entry['bound']} bound "
                f"({entry['searched_value']:.4g}; {keys}): {entry['meaning']}"
            )
    names = {"ttft": "TTFT", "tpot": "TPOT", "output_throughput": "output tok/s"}
    print(f"  {'error (MAPE)':<32}{'runs':>6}{'default':>12}{'calibrated':>12}")
    for part, label in (("fit", "fitted runs"), ("held_out", "held-out runs")):
        errors = profile.error.get(part)
        if errors is None:
            print(f"  {label}: none (give more runs for a held-out figure)")
            continue
        for metric in REPORTED:
            after = errors["calibrated"].get(metric)
            before = errors["default"].get(metric)
            if after is None or before is None:
                continue
            print(
                f"  {label + ', ' + names[metric]:<32}{after['runs']:>6}"
                f"{before['mape']:>12.1%}{after['mape']:>12.1%}"
            )
    band = profile.provenance.get("model_error")
    print(
        "  step-time error band of the held-out runs (measured / calibrated mean TPOT): "
        + (
            f"p10 x{band['p10']:.3g}, p50 x{band['p50']:.3g}, p90 x{band['p90']:.3g} "
            f"(n {band['n']}; plan.model_error=measured answers with it)"
            if band
            else "none (no run held out)"
        )
    )
    print("  per run (measured / default / calibrated; * held out):")
    for run, record in zip(runs, profile.runs, strict=True):
        parts = []
        for metric in REPORTED:
            m = record["measured"].get(metric)
            if not m:
                continue
            scale, unit = (1.0, "tok/s") if metric == "output_throughput" else (1e3, "ms")
            d, c = record["default"].get(metric), record["calibrated"].get(metric)
            shown = [f"{v * scale:.4g}" if v is not None else "n/a" for v in (m, d, c)]
            parts.append(f"{names[metric]} {' / '.join(shown)} {unit}")
        mark = "*" if run.held_out else " "
        print(f"  {mark} {Path(run.source).name} [{run.index}] {'; '.join(parts)}")
    return 0
