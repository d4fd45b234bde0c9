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
import pyarrow as pa
import pyarrow.csv as pacsv
from scipy.optimize import nnls

from sim.arrow_numpy import column_to_numpy
from sim.calibration.fitting import HOLDOUT_EVERY, errors, holdout, sha256
from sim.catalog.model import ModelSpec
from sim.engine.step_shape import REQUIRED_SHAPE_COLUMNS, STEP_SHAPE_COLUMNS
from sim.engine.step_time.profile import Profile
from sim.errors import ConfigError, require
from sim.resources import resolve_path

STEP_COLUMNS = (*STEP_SHAPE_COLUMNS, "step_time_s")
REQUIRED_STEP_COLUMNS = (*REQUIRED_SHAPE_COLUMNS, "step_time_s")
FIELD = "calibrate.steps"


# the shape columns that count things (tokens, sequences) and must be whole numbers; the
# attention sums are regressors only, so a fractional one (an engine's float log) is kept
COUNT_COLUMNS = ("num_prefill_tokens", "num_decode_seqs", "host_loaded_tokens")


def read_steps(path: str | Path) -> dict[str, np.ndarray]:
    """The per-step CSV's columns; a one-line error on ``calibrate.steps`` naming the file as
    given and what is wrong (a missing column; for a bad cell its column, its line in the file
    and its value): every cell a finite number, every count a whole number >= 0, every other
    shape column >= 0 and every ``step_time_s`` above 0."""
    shown = str(path)
    found = resolve_path(path, FIELD)
    try:
        table = pacsv.read_csv(found)
    except (pa.ArrowInvalid, OSError) as err:  # empty, ragged rows, not text, unreadable
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        reason = ascii(reason[:100])[1:-1]  # a binary file's bytes would garble the line
        said = "is empty" if "Empty CSV file" in reason else f"not a readable CSV ({reason})"
        raise ConfigError(FIELD, shown, said) from None
    missing = [c for c in REQUIRED_STEP_COLUMNS if c not in table.column_names]
    require(
        not missing,
        FIELD,
        shown,
        f"missing column(s) {', '.join(missing)}; need {', '.join(REQUIRED_STEP_COLUMNS)}",
    )
    # a shape column added after the file was written (one with a default) counts as 0
    cols = {
        c: _column(table, c, shown) if c in table.column_names else np.zeros(table.num_rows)
        for c in STEP_COLUMNS
    }
    require(
        len(cols["step_time_s"]) >= 2 * HOLDOUT_EVERY,
        FIELD,
        shown,
        f"needs at least {2 * HOLDOUT_EVERY} rows",
    )
    return cols


def _column(table: pa.Table, name: str, shown: str) -> np.ndarray:
    """One column as floats, each cell checked (``read_steps``); a bad cell is named by its
    line in the file (the header is line 1)."""
    values = column_to_numpy(table.column(name))
    if values.dtype == object:  # text somewhere in the column
        numbers = []
        for row, cell in enumerate(values):
            try:
                numbers.append(float(cell))
            except (TypeError, ValueError):
                raise ConfigError(
                    FIELD, shown, f"line {row + 2}: {name}={cell!r} is not a number"
                ) from None
        values = np.array(numbers)
    values = values.astype(float)
    if name == "step_time_s":
        bad, rule = ~(np.isfinite(values) & (values > 0)), "a finite time above 0"
    elif name in COUNT_COLUMNS:
        ok = np.isfinite(values) & (values >= 0)
        bad = ~ok | (ok & (values != np.round(np.where(ok, values, 0))))
        rule = "a whole number >= 0"
    else:
        bad, rule = ~(np.isfinite(values) & (values >= 0)), "a finite number >= 0"
    if bad.any():
        row = int(np.argmax(bad))
        cell = "empty" if np.isnan(values[row]) else repr(float(values[row]))
        raise ConfigError(FIELD, shown, f"line {row + 2}: {name}={cell} must be {rule}")
    return values


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
    spec = model if isinstance(model, ModelSpec) else None
    cols = read_steps(path)
    path = resolve_path(path, FIELD)  # where a shipped:NAME file is, for its digest
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
