"""Fitting step-time profiles: from a per-step CSV anyone can record, or from kernel tables.

``fleetcast calibrate --steps FILE ...`` reads one row per engine step with the columns
``num_prefill_tokens`` (P), ``num_decode_seqs`` (D), ``prefill_attn`` (Ap: sum over prefill
chunks of chunk × (context before the chunk + chunk)), ``decode_context`` (Ad: sum over decoding
sequences of their context, the new token included) and ``step_time_s``: the GUIDE's linear
contract, measured. ``fleetcast profile`` writes such a file from PyTorch; any engine's step
log can be turned into one. The fit is non-negative least squares (scipy), so every coefficient
is a cost and more work is never faster.

``fleetcast calibrate --kernels DIR ...`` builds a profile from per-kernel timing tables such as
``data/calibration/`` (aiconfigurator's measured GEMM, prefill-attention and decode-attention
kernels): the GEMM curve of a whole step is the sum of the model's GEMMs at each token count,
and the attention costs are regressions on the kernel rows. Element-wise work and the per-step
overhead are not in the kernel tables; they are modelled (from HBM bandwidth) or fitted on
end-to-end runs, and the profile says which.

Either way the data are split: the fit sees 80% of the rows (every fifth row is held out), and
the profile records the error on the rest.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow.csv as pacsv
from scipy.optimize import nnls

from sim.arrow_numpy import column_to_numpy
from sim.catalog.hardware import GPU
from sim.catalog.model import ModelSpec
from sim.engine.step_shape import REQUIRED_SHAPE_COLUMNS, STEP_SHAPE_COLUMNS
from sim.engine.step_time.profile import (
    TP_EXPONENT,
    Profile,
    profile_file_name,
    shipped_profile_dir,
)
from sim.errors import ConfigError, require
from sim.resources import resolve_path

if TYPE_CHECKING:  # pandas is imported only when kernel tables are read
    import pandas as pd

STEP_COLUMNS = (*STEP_SHAPE_COLUMNS, "step_time_s")
REQUIRED_STEP_COLUMNS = (*REQUIRED_SHAPE_COLUMNS, "step_time_s")
HOLDOUT_EVERY = 5  # every fifth row is held out of the fit
# The per-step engine overhead the shipped kernel profiles carry, fitted on 89 measured serving
# runs by benchmarks/fidelity.py --fit (README, "Calibrated step times"); named here only to
# tell a user what a sensible --c0 is.
SHIPPED_C0_S = 0.001

# Kernel-table names (the `system` and `backend_dir` columns of data/calibration/).
SYSTEMS = {"H100-SXM": "h100_sxm", "H200": "h200_sxm"}
GEMM_DTYPES = {"bf16": "bfloat16", "fp8": "fp8"}
KV_DTYPES = {"bf16": "bfloat16", "fp8": "fp8"}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _errors(predicted: np.ndarray, measured: np.ndarray) -> dict:
    ape = np.abs(predicted - measured) / measured
    return {
        "mape": float(ape.mean()),
        "median_ape": float(np.median(ape)),
        "max_ape": float(ape.max()),
        "rows": int(len(measured)),
    }


def _holdout(n: int) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    mask[HOLDOUT_EVERY - 1 :: HOLDOUT_EVERY] = True
    return mask


def read_steps(path: str | Path) -> dict[str, np.ndarray]:
    """The per-step CSV's columns; a one-line error naming what is missing or wrong."""
    path = resolve_path(path, "calibrate.steps")
    table = pacsv.read_csv(path)
    missing = [c for c in REQUIRED_STEP_COLUMNS if c not in table.column_names]
    require(
        not missing,
        "calibrate.steps",
        str(path),
        f"missing column(s) {', '.join(missing)}; need {', '.join(REQUIRED_STEP_COLUMNS)}",
    )
    # a shape column added after the file was written (one with a default) counts as 0
    cols = {
        c: column_to_numpy(table.column(c)).astype(float)
        if c in table.column_names
        else np.zeros(table.num_rows)
        for c in STEP_COLUMNS
    }
    require(
        len(cols["step_time_s"]) >= 2 * HOLDOUT_EVERY,
        "calibrate.steps",
        str(path),
        f"needs at least {2 * HOLDOUT_EVERY} rows",
    )
    require(
        bool(np.all(cols["step_time_s"] > 0)),
        "calibrate.steps",
        str(path),
        "step_time_s must be > 0 in every row",
    )
    return cols


def fit_steps(cols: dict[str, np.ndarray]) -> tuple[dict[str, float | None], dict[str, Any]]:
    """Non-negative least squares of the linear contract on 80% of rows; error on the rest.

    Rows are weighted by 1/time so the fit minimises relative, not absolute, error (a 5 ms
    decode step matters as much as a 500 ms prefill)."""
    p, d = cols["num_prefill_tokens"], cols["num_decode_seqs"]
    ap, ad, t = cols["prefill_attn"], cols["decode_context"], cols["step_time_s"]
    design = np.column_stack([np.ones_like(t), p + d, d, ap, ad, (p > 0).astype(float)])
    held = _holdout(len(t))
    weight = 1.0 / t
    coef, _ = nnls(design[~held] * weight[~held, None], t[~held] * weight[~held])
    names = ("c0", "c_token", "c_decode_seq", "c_prefill_attn", "c_decode_attn", "c_prefill_step")
    # typed as a profile's coefficients (which may hold None)
    coefficients: dict[str, float | None] = dict(zip(names, (float(x) for x in coef), strict=True))
    return coefficients, _errors(design[held] @ coef, t[held])


def calibrate_steps(
    path: str | Path, *, model: str, hardware: str, weights: str, kv: str, backend: str
) -> Profile:
    path = Path(path)
    coefficients, error = fit_steps(read_steps(path))
    return Profile(
        model=model,
        hardware=hardware,
        weights_precision=weights,
        kv_precision=kv,
        backend=backend,
        coefficients=coefficients,
        measured=["every coefficient, fitted to measured step times"],
        modelled=[],
        provenance={
            "method": "nnls on the per-step linear contract",
            "sources": [{"path": path.name, "sha256": _sha256(path)}],
            "created": datetime.date.today().isoformat(),
        },
        holdout_error={"step_time": error},
    )


# -- kernel tables -------------------------------------------------------------------------

KERNEL_FILES = {
    "gemm": "aic_measured_gemm_llama31_8b_shapes.csv",
    "prefill_attention": "aic_measured_context_attention_llama31_8b.csv",
    "decode_attention": "aic_measured_generation_attention_llama31_8b.csv",
}
KERNEL_MODEL = "meta-llama/Llama-3.1-8B"  # the shapes the shipped kernel tables measure
# Element-wise work per token and layer, in elements moved: two RMSNorms and two residual adds
# read and write the hidden state (4 x hidden), the SiLU-gate reads gate and up and writes one
# (3 x ffn). The achieved share of HBM bandwidth follows aiconfigurator's empirical constant
# (0.8; its systems/*.yaml); the kernels' launch cost is part of the fitted per-step c0.
ELEMENTWISE_BANDWIDTH_SHARE = 0.8


def _kernel_rows(directory: Path, which: str) -> tuple[pd.DataFrame, Path]:
    import pandas as pd  # calibration is offline; pandas reads these tables comfortably

    path = directory / KERNEL_FILES[which]
    require(path.exists(), "calibrate.kernels", str(directory), f"missing {KERNEL_FILES[which]}")
    return pd.read_csv(path), path


def _interp_role(rows: pd.DataFrame, role_a: str, role_b: str, weight_b: float) -> pd.Series:
    a = rows[rows.llama31_8b_role.str.startswith(role_a)].set_index("m").latency_ms
    b = rows[rows.llama31_8b_role.str.startswith(role_b)].set_index("m").latency_ms
    common = a.index.intersection(b.index)
    return a[common] * (1 - weight_b) + b[common] * weight_b


def _monotone(values: np.ndarray) -> np.ndarray:
    """Kernel timings wobble by a few percent between neighbouring sizes; a step curve must
    never decrease, so each point is raised to the running maximum."""
    return np.maximum.accumulate(values)


def gemm_curves(
    gemm: pd.DataFrame, model: ModelSpec, num_layers: int, system: str, backend: str, dtype: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The whole-model GEMM time of a step (s) against its tokens, and the lm_head's."""
    rows = gemm[
        (gemm.system == system)
        & (gemm.backend_dir == backend)
        & (gemm.gemm_dtype == GEMM_DTYPES[dtype])
    ]
    require(
        len(rows) > 0,
        "calibrate.kernels",
        f"{system}/{backend}/{dtype}",
        "no GEMM rows for this GPU, backend and precision",
    )
    ffn = model.ffn_size
    qkv = rows[rows.llama31_8b_role.str.startswith("qkv_proj")].set_index("m").latency_ms
    o_proj = rows[rows.llama31_8b_role.str.startswith("o_proj")].set_index("m").latency_ms
    # gate+up (n = 2 x ffn) and down (k = ffn) lie between grid points: linear in n (or k)
    gate_up = _interp_role(
        rows,
        "grid point below gate_up",
        "grid point above gate_up",
        (2 * ffn - 16384) / (51200 - 16384),
    )
    down = _interp_role(
        rows,
        "grid point below down_proj",
        "grid point above down_proj",
        (ffn - 12288) / (16384 - 12288),
    )
    per_layer = (qkv + o_proj + gate_up + down).dropna()
    tokens = per_layer.index.to_numpy(dtype=float)
    gemm_s = _monotone(per_layer.to_numpy() * num_layers / 1e3)
    # lm_head (n = vocab) is past the grid's largest n (65,536): scale that point by n
    lm = rows[rows.llama31_8b_role.str.startswith("largest grid n")].set_index("m").latency_ms
    lm_s = _monotone(lm.to_numpy() * model.vocab_size / 65536 / 1e3)
    return tokens, gemm_s, lm.index.to_numpy(dtype=float), lm_s


def _curve_holdout_error(tokens: np.ndarray, seconds: np.ndarray) -> dict:
    """Interpolate each held-out grid point from the others."""
    held = _holdout(len(tokens))
    held[0] = held[-1] = False  # the ends cannot be interpolated
    predicted = np.interp(tokens[held], tokens[~held], seconds[~held])
    return _errors(predicted, seconds[held])


def _regress(design: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, dict]:
    held = _holdout(len(target))
    weight = 1.0 / target
    coef, _ = nnls(design[~held] * weight[~held, None], target[~held] * weight[~held])
    return coef, _errors(design[held] @ coef, target[held])


def attention_coefficients(
    prefill: pd.DataFrame,
    decode: pd.DataFrame,
    system: str,
    backend: str,
    kv: str,
    num_layers: int,
) -> tuple[dict[str, float | None], dict[str, Any]]:
    """Per-step attention costs from per-layer kernel rows (times the layers)."""
    kv_dtype = KV_DTYPES[kv]
    p = prefill[
        (prefill.system == system)
        & (prefill.backend_dir == backend)
        & (prefill.attn_dtype == "bfloat16")
        & (prefill.kv_cache_dtype == kv_dtype)
    ]
    d = decode[
        (decode.system == system)
        & (decode.backend_dir == backend)
        & (decode.kv_cache_dtype == kv_dtype)
    ]
    require(
        len(p) > 0 and len(d) > 0,
        "calibrate.kernels",
        f"{system}/{backend}/kv {kv}",
        "no attention rows for this GPU, backend and KV precision",
    )
    batch, seq = p.batch_size.to_numpy(float), p.seq_len.to_numpy(float)
    # one layer: fixed cost + per (query, key) pair (Ap = batch x seq^2 for fresh prompts)
    # + per token (reading Q, writing K and V)
    pc, prefill_err = _regress(
        np.column_stack([np.ones_like(seq), batch * seq * seq, batch * seq]),
        p.latency_ms.to_numpy() / 1e3,
    )
    batch, kv_len = d.batch_size.to_numpy(float), d.kv_len.to_numpy(float)
    # one layer: fixed cost + per KV token read (Ad = batch x kv_len) + per sequence
    dc, decode_err = _regress(
        np.column_stack([np.ones_like(kv_len), batch * kv_len, batch]),
        d.latency_ms.to_numpy() / 1e3,
    )
    coefficients = {
        "c_prefill_step": pc[0] * num_layers,
        "c_prefill_attn": pc[1] * num_layers,
        "c_prefill_token": pc[2] * num_layers,
        "c_decode_step": dc[0] * num_layers,
        "c_decode_attn": dc[1] * num_layers,
        "c_decode_seq": dc[2] * num_layers,
    }
    held_out = {
        "prefill": (p[_holdout(len(p))], num_layers),
        "decode": (d[_holdout(len(d))], num_layers),
    }
    return coefficients, {
        "prefill_attention": prefill_err,
        "decode_attention": decode_err,
        "_held_out_rows": held_out,
    }


def _step_holdout_error(held_out: dict, c: dict, gemm: tuple, lm_head: tuple) -> dict:
    """Whole steps whose attention kernels were held out of the fit: the profile's step time
    against the same step composed from the measured kernels (GEMM curve, element-wise and
    overhead terms are common to both, as they would be in a real step)."""
    predicted, measured = [], []
    prefill, layers = held_out["prefill"]
    for batch, seq, ms in zip(prefill.batch_size, prefill.seq_len, prefill.latency_ms, strict=True):
        tokens = batch * seq
        common = c["c0"] + np.interp(tokens, *gemm) + np.interp(1, *lm_head) + c["c_token"] * tokens
        measured.append(common + layers * ms / 1e3)
        predicted.append(
            common
            + c["c_prefill_step"]
            + c["c_prefill_token"] * tokens
            + c["c_prefill_attn"] * batch * seq * seq
        )
    decode, layers = held_out["decode"]
    for batch, kv_len, ms in zip(decode.batch_size, decode.kv_len, decode.latency_ms, strict=True):
        common = (
            c["c0"] + np.interp(batch, *gemm) + np.interp(batch, *lm_head) + c["c_token"] * batch
        )
        measured.append(common + layers * ms / 1e3)
        predicted.append(
            common
            + c["c_decode_step"]
            + c["c_decode_seq"] * batch
            + c["c_decode_attn"] * batch * kv_len
        )
    return _errors(np.array(predicted), np.array(measured))


def calibrate_kernels(
    directory: str | Path,
    *,
    model: ModelSpec,
    gpu: GPU,
    weights: str,
    kv: str,
    backend: str,
    c0: float,
    allreduce_latency_s: float | None = None,
    tp_compute_exponent: float = 1.0,
) -> Profile:
    """A profile from kernel tables for ``model`` on ``gpu``.

    ``c0``, ``allreduce_latency_s`` and ``tp_compute_exponent`` are not in any kernel table;
    they are fitted on serving runs (benchmarks/fidelity.py --fit) and passed in.
    ``allreduce_latency_s`` None leaves the latency to the GPU catalog.
    """
    directory = resolve_path(str(directory), "calibrate.kernels", kind="folder")
    require(
        model.name == KERNEL_MODEL,
        "model",
        model.name,
        f"the kernel tables measure {KERNEL_MODEL}'s GEMM and attention shapes",
    )
    require(gpu.name in SYSTEMS, "hardware", gpu.name, f"kernel tables cover {', '.join(SYSTEMS)}")
    require(
        weights in GEMM_DTYPES,
        "precision.weights",
        weights,
        f"kernel tables cover {', '.join(GEMM_DTYPES)}",
    )
    require(kv in KV_DTYPES, "precision.kv", kv, f"kernel tables cover {', '.join(KV_DTYPES)}")
    system = SYSTEMS[gpu.name]
    gemm, gemm_path = _kernel_rows(directory, "gemm")
    prefill, prefill_path = _kernel_rows(directory, "prefill_attention")
    decode, decode_path = _kernel_rows(directory, "decode_attention")
    tokens, gemm_s, lm_tokens, lm_s = gemm_curves(
        gemm, model, model.num_layers, system, backend, weights
    )
    coefficients, errors = attention_coefficients(
        prefill, decode, system, backend, kv, model.num_layers
    )
    elementwise_bytes = 2.0 * (4 * model.hidden_size + 3 * model.ffn_size) * model.num_layers
    coefficients["c_token"] = elementwise_bytes / (
        ELEMENTWISE_BANDWIDTH_SHARE * gpu.hbm_bandwidth_bytes_per_s
    )
    coefficients["c0"] = c0
    coefficients["c_allreduce_latency"] = allreduce_latency_s
    coefficients[TP_EXPONENT] = tp_compute_exponent
    errors["gemm_curve"] = _curve_holdout_error(tokens, gemm_s)
    errors["step_time"] = _step_holdout_error(
        errors.pop("_held_out_rows"), coefficients, (tokens, gemm_s), (lm_tokens, lm_s)
    )
    return Profile(
        model=model.name,
        hardware=gpu.name,
        weights_precision=weights,
        kv_precision=kv,
        backend=backend,
        coefficients={k: None if v is None else float(v) for k, v in coefficients.items()},
        gemm_tokens=tokens.tolist(),
        gemm_s=gemm_s.tolist(),
        lm_head_tokens=lm_tokens.tolist(),
        lm_head_s=lm_s.tolist(),
        measured=[
            "gemm curve (qkv, o_proj exact; gate_up, down interpolated between measured "
            "grid shapes)",
            "lm_head curve (largest measured n, scaled to the vocabulary)",
            "prefill attention (c_prefill_step, c_prefill_attn, part of c_token)",
            "decode attention (c_decode_step, c_decode_attn, c_decode_seq)",
        ],
        modelled=[
            "element-wise work in c_token: bytes / (0.8 x HBM bandwidth)",
            "c0 (the engine's per-step overhead), c_allreduce_latency (one TP "
            "all-reduce) and tp_compute_exponent (how per-token work speeds up on tp "
            "GPUs): fitted on end-to-end serving runs (benchmarks/fidelity.py --fit), "
            "not in any kernel table",
            "tensor parallelism: weights and KV reads / tp, per-token work / "
            "tp**tp_compute_exponent, plus ring all-reduces",
        ],
        provenance={
            "method": "kernel tables",
            "sources": [
                {"path": p.name, "sha256": _sha256(p)}
                for p in (gemm_path, prefill_path, decode_path)
            ],
            "system": system,
            "backend_dir": backend,
            "created": datetime.date.today().isoformat(),
            "licence": "Apache-2.0, NVIDIA aiconfigurator-core 0.12.0 (data/calibration/)",
        },
        holdout_error=errors,
    )


# -- command line ----------------------------------------------------------------------------


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
