"""Building a profile from per-kernel timing tables: ``fleetcast calibrate --kernels DIR``.

The tables are aiconfigurator's measured GEMM, prefill-attention and decode-attention kernels
(``data/calibration/``, ``shipped:calibration``). The GEMM curve of a whole step is the sum of
the model's GEMMs at each token count, and the attention costs are regressions on the kernel
rows. Element-wise work and the per-step overhead are not in the kernel tables: the first is
modelled from HBM bandwidth, the second (``c0``, with the TP all-reduce latency and the TP
compute exponent) is fitted on end-to-end serving runs and passed in; the profile says which
number is which.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.optimize import nnls

from sim.calibration.fitting import errors, holdout, sha256
from sim.catalog.hardware import GPU
from sim.catalog.model import ModelSpec
from sim.engine.step_time.profile import TP_EXPONENT, Profile
from sim.errors import require
from sim.resources import resolve_path

if TYPE_CHECKING:  # pandas is imported only when kernel tables are read
    import pandas as pd

# Kernel-table names (the `system` and `backend_dir` columns of data/calibration/).
SYSTEMS = {"H100-SXM": "h100_sxm", "H200": "h200_sxm"}
GEMM_DTYPES = {"bf16": "bfloat16", "fp8": "fp8"}
KV_DTYPES = {"bf16": "bfloat16", "fp8": "fp8"}
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
    # imported here: pandas, the calibrate extra (~290 ms of CPU)
    import pandas as pd

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
    held = holdout(len(tokens))
    held[0] = held[-1] = False  # the ends cannot be interpolated
    predicted = np.interp(tokens[held], tokens[~held], seconds[~held])
    return errors(predicted, seconds[held])


def _regress(design: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, dict]:
    held = holdout(len(target))
    weight = 1.0 / target
    coef, _ = nnls(design[~held] * weight[~held, None], target[~held] * weight[~held])
    return coef, errors(design[held] @ coef, target[held])


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
        "prefill": (p[holdout(len(p))], num_layers),
        "decode": (d[holdout(len(d))], num_layers),
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
    return errors(np.array(predicted), np.array(measured))


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
                {"path": p.name, "sha256": sha256(p)}
                for p in (gemm_path, prefill_path, decode_path)
            ],
            "system": system,
            "backend_dir": backend,
            "created": datetime.date.today().isoformat(),
            "licence": "Apache-2.0, NVIDIA aiconfigurator-core 0.12.0 (data/calibration/)",
        },
        holdout_error=errors,
    )
