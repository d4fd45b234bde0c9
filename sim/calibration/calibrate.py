"""``fleetcast calibrate``: fit a step-time profile and write it where it cannot clobber one.

    fleetcast calibrate --steps FILE [overrides] [--backend B] [--out PATH] [--force]
    fleetcast calibrate --kernels DIR --c0 S [--allreduce-latency S] [--tp-exponent X] ...

The overrides (``model=``, ``hardware=``, ``precision.weights=``, ``precision.kv=``) say what
the profile is for. ``--steps`` fits a per-step CSV (``sim.calibration.step_fit``), ``--kernels``
builds from kernel tables (``sim.calibration.kernels``). Without ``--out`` the profile goes to
the current directory under its canonical name; an existing file is replaced only with
``--force``, and a shipped profile never.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sim.calibration.kernels import calibrate_kernels
from sim.calibration.step_fit import STEP_COLUMNS, calibrate_steps
from sim.catalog.hardware import GPU
from sim.catalog.model import ModelSpec
from sim.engine.step_time.profile import Profile, profile_file_name, shipped_profile_dir
from sim.errors import ConfigError, require

# The per-step engine overhead the shipped kernel profiles carry, fitted on 89 measured serving
# runs by benchmarks/fidelity.py --fit (README, "Calibrated step times"); named here only to
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
        "--out", help="where to write the profile (default: ./<name>.json in the current directory)"
    )
    parser.add_argument(
        "--force", action="store_true", help="replace the file at --out if there is one"
    )
    args, overrides = parser.parse_known_args(argv)
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
    profile.save(out)
    print(f"profile: {out}   (use it with step_time=calibrated step_time.profile={out})")
    for part, held_out in profile.holdout_error.items():
        print(
            f"  held-out error, {part:<18} MAPE {held_out['mape']:6.2%}  "
            f"median {held_out['median_ape']:6.2%}  max {held_out['max_ape']:6.2%}  "
            f"({held_out['rows']} rows)"
        )
    return 0


def _deployment_parts(overrides: list[str]) -> tuple[ModelSpec, GPU, str, str]:
    from sim.config.compose import check_overrides, compose_config

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
    require(
        force or not out.exists(), "calibrate.out", str(out), "exists; use --force to replace it"
    )


def _calibrate(
    args: argparse.Namespace, model: ModelSpec, gpu: GPU, weights: str, kv: str
) -> Profile:
    if args.steps:
        return calibrate_steps(
            args.steps,
            model=model.name,
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
