"""The files of a run's folder (GUIDE section 3): named once, written once, never half-written.

Each file is written through a temporary file in the same folder and renamed into place, so a
reader never sees half a file. ``summary.json`` is written last, so its presence marks a
finished run; a sweep job that failed on a bad configuration leaves ``error.txt`` instead.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from omegaconf import OmegaConf

CONFIG_FILE = "config.yaml"
REQUESTS_FILE = "requests.parquet"
STEPS_FILE = "steps.parquet"
SUMMARY_FILE = "summary.json"
ERROR_FILE = "error.txt"


@dataclass
class RunResult:
    """What one run produced: the two tables, the summary and the resolved config."""

    requests: pa.Table
    steps: pa.Table
    summary: dict
    config: dict


def _atomic_write(path: Path, write: Callable[[str], object]) -> None:
    """Write through a temporary file in the same folder, then rename: a reader never sees a
    half-written file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_run(result: RunResult, output_dir: str | Path) -> Path:
    """Write the run's four files. ``summary.json`` goes last: its presence marks a finished
    run, and a run that fails before it leaves no summary."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / SUMMARY_FILE).unlink(missing_ok=True)  # an older run's summary must not linger
    _atomic_write(
        out / CONFIG_FILE,
        lambda p: Path(p).write_text(OmegaConf.to_yaml(OmegaConf.create(result.config))),
    )
    _atomic_write(out / REQUESTS_FILE, lambda p: pq.write_table(result.requests, p))
    _atomic_write(out / STEPS_FILE, lambda p: pq.write_table(result.steps, p))
    _atomic_write(out / SUMMARY_FILE, lambda p: Path(p).write_text(to_json(result.summary)))
    return out


def to_json(summary: dict[str, Any]) -> str:
    """JSON text with NaN written as null (NaN is not JSON)."""

    def clean(x: object) -> object:
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, float) and not math.isfinite(x):
            return None
        return x

    return json.dumps(clean(summary), indent=2) + "\n"
