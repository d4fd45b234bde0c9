"""What every calibration fit shares: rows held out of the fit, the error on them, and where
the data came from.

The fit sees 80% of the rows: every fifth row is held out, and the profile records the error on
those (mean, median and max absolute percentage error). Each source file is recorded with its
sha256, so a profile says exactly which measurements made it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

HOLDOUT_EVERY = 5  # every fifth row is held out of the fit


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def errors(predicted: np.ndarray, measured: np.ndarray) -> dict:
    ape = np.abs(predicted - measured) / measured
    return {
        "mape": float(ape.mean()),
        "median_ape": float(np.median(ape)),
        "max_ape": float(ape.max()),
        "rows": int(len(measured)),
    }


def holdout(n: int) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    mask[HOLDOUT_EVERY - 1 :: HOLDOUT_EVERY] = True
    return mask
