"""Fitting a profile to a per-step CSV anyone can record: ``fleetcast calibrate --steps FILE``.

The file has one row per engine step with the columns ``num_prefill_tokens`` (P),
``num_decode_seqs`` (D), ``prefill_attn`` (Ap: sum over prefill chunks of chunk × (context before
the chunk + chunk)), ``decode_context`` (Ad: sum over decoding sequences of their context, the new
token included) and ``step_time_s``: the linear step time's contract (docs/reference/config.md),
measured (the columns are ``StepShape``'s fields). ``fleetcast profile`` writes such a file from
PyTorch; any engine's step log can be turned into one. The fit is non-negative least squares
(SciPy), rows weighted by 1/time, so every coefficient is a cost and more work is never faster.

For a mixture-of-experts model the fit has one more column, the share of the routed experts the
step's P + D tokens touch (``ModelSpec.expected_experts_touched``), whose coefficient is
``c_expert_weights``: the time to read every routed expert once (``sim.engine.step_time.
calibrated``). Give the steps of small decode batches too: they are where it shows.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.csv as pacsv
from scipy.optimize import nnls

from sim.arrow_numpy import column_to_numpy
from sim.calibration.fitting import HOLDOUT_EVERY, errors, holdout, sha256
from sim.catalog.model import ModelSpec
from sim.engine.step_shape import REQUIRED_SHAPE_COLUMNS, STEP_SHAPE_COLUMNS
from sim.engine.step_time.profile import Profile
from sim.errors import require
from sim.resources import resolve_path

STEP_COLUMNS = (*STEP_SHAPE_COLUMNS, "step_time_s")
REQUIRED_STEP_COLUMNS = (*REQUIRED_SHAPE_COLUMNS, "step_time_s")


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


def fit_steps(
    cols: dict[str, np.ndarray], model: ModelSpec | None = None
) -> tuple[dict[str, float | None], dict[str, Any]]:
    """Non-negative least squares of the linear contract on 80% of rows; error on the rest.

    Rows are weighted by 1/time so the fit minimises relative, not absolute, error (a 5 ms
    decode step matters as much as a 500 ms prefill). A mixture-of-experts ``model`` adds the
    touched experts' read (module doc)."""
    p, d = cols["num_prefill_tokens"], cols["num_decode_seqs"]
    ap, ad, t = cols["prefill_attn"], cols["decode_context"], cols["step_time_s"]
    columns = [np.ones_like(t), p + d, d, ap, ad, (p > 0).astype(float)]
    names = ["c0", "c_token", "c_decode_seq", "c_prefill_attn", "c_decode_attn", "c_prefill_step"]
    share = experts_share(cols, model)
    if share is not None:
        columns.append(share)
        names.append("c_expert_weights")
    design = np.column_stack(columns)
    held = holdout(len(t))
    weight = 1.0 / t
    coef, _ = nnls(design[~held] * weight[~held, None], t[~held] * weight[~held])
    # typed as a profile's coefficients (which may hold None)
    coefficients: dict[str, float | None] = dict(zip(names, (float(x) for x in coef), strict=True))
    return coefficients, errors(design[held] @ coef, t[held])


# the experts' term is fitted only where enough steps touch under this share of the experts
SMALL_STEP_SHARE = 0.9
SMALL_STEPS_MIN = 10  # ... and at least this many such steps, or 5% of the rows


def experts_share(cols: dict[str, np.ndarray], model: ModelSpec | None) -> np.ndarray | None:
    """Per step, the share of a MoE ``model``'s routed experts its P + D tokens touch; None for
    a dense model, or when too few steps are small enough for the share to vary (above about
    0.9 it is one more constant, which the fit could put in c0 or here alike)."""
    if model is None or not model.is_moe:
        return None
    tokens = cols["num_prefill_tokens"] + cols["num_decode_seqs"]
    touched = [model.expected_experts_touched(int(n)) for n in tokens]
    share = np.array(touched) / model.num_experts
    small = int(np.count_nonzero(share < SMALL_STEP_SHARE))
    return share if small >= max(SMALL_STEPS_MIN, 0.05 * len(share)) else None


def calibrate_steps(
    path: str | Path,
    *,
    model: str | ModelSpec,
    hardware: str,
    weights: str,
    kv: str,
    backend: str,
) -> Profile:
    """A profile fitted to the per-step CSV at ``path``; ``model`` by its shape (a mixture of
    experts gets the experts' term) or by name only (the linear contract)."""
    path = Path(path)
    spec = model if isinstance(model, ModelSpec) else None
    cols = read_steps(path)
    coefficients, error = fit_steps(cols, spec)
    modelled = []
    if spec is not None and spec.is_moe and "c_expert_weights" not in coefficients:
        modelled.append(
            "c_expert_weights not fitted: fewer than "
            f"{max(SMALL_STEPS_MIN, int(np.ceil(0.05 * len(cols['step_time_s']))))} steps touch "
            f"under {SMALL_STEP_SHARE:.0%} of the experts (give small decode batches); every "
            "step is priced as reading all of them"
        )
    return Profile(
        model=model.name if isinstance(model, ModelSpec) else model,
        hardware=hardware,
        weights_precision=weights,
        kv_precision=kv,
        backend=backend,
        coefficients=coefficients,
        measured=["every coefficient, fitted to measured step times"],
        modelled=modelled,
        provenance={
            "method": "nnls on the per-step linear contract",
            "sources": [{"path": path.name, "sha256": sha256(path)}],
            "created": datetime.date.today().isoformat(),
        },
        holdout_error={"step_time": error},
    )
