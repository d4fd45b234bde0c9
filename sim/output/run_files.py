"""The files of a run's folder (GUIDE section 3): named once, written once, never half-written.

Each file is written through a temporary file in the same folder (``.NAME.XXXX.partial``) and
renamed into place, so a reader never sees half a file. A long run streams its tables into
their temporaries while it runs (``RunFolder``). ``summary.json`` is written last, so its
presence marks a finished run; a sweep job that failed on a bad configuration leaves
``error.txt`` instead. A run killed midway leaves temporaries, which the next run into the
folder removes (``remove_temporaries``).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from omegaconf import OmegaConf

CONFIG_FILE = "config.yaml"
REQUESTS_FILE = "requests.parquet"
STEPS_FILE = "steps.parquet"
SUMMARY_FILE = "summary.json"
SCALING_FILE = "scaling.parquet"  # an autoscaled fleet's changes (sim.output.scaling)
ERROR_FILE = "error.txt"


@dataclass
class RunResult:
    """What one run produced: the two tables (None when they went straight to a run folder),
    the summary, the resolved config, and what each rejection reason means for this fleet."""

    requests: pa.Table | None
    steps: pa.Table | None
    summary: dict
    config: dict
    rejection_texts: dict[str, str] = field(default_factory=dict)
    scaling: pa.Table | None = None  # an autoscaled fleet's changes (sim.output.scaling)


def _temporary(folder: Path, name: str) -> Path:
    """A new empty temporary for ``name`` in ``folder``, readable as the user's umask says
    (``mkstemp`` makes it private)."""
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".partial")
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    return Path(tmp)


def remove_temporaries(folder: Path) -> None:
    """Delete what a run killed while writing into ``folder`` left behind."""
    for stale in folder.glob(".*.partial"):
        stale.unlink(missing_ok=True)


def _atomic_write(path: Path, write: Callable[[str], object]) -> None:
    """Write through a temporary file in the same folder, then rename: a reader never sees a
    half-written file."""
    tmp = _temporary(path.parent, path.name)
    try:
        write(str(tmp))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class RunFolder:
    """A run's folder while the run writes into it: its summary gone from the start (a run
    that fails must not leave an older run's summary looking like its own), temporaries that
    ``commit`` renames into place, and ``discard`` for whatever was not committed."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / SUMMARY_FILE).unlink(missing_ok=True)
        self._temporaries: dict[str, Path] = {}

    def temporary(self, name: str) -> Path:
        """Where to write ``name`` (or a scratch file so named) before it is committed."""
        tmp = _temporary(self.path, name)
        self._temporaries[name] = tmp
        return tmp

    def commit(self, name: str) -> None:
        os.replace(self._temporaries.pop(name), self.path / name)

    def write(self, name: str, text: str) -> None:
        _atomic_write(self.path / name, lambda p: Path(p).write_text(text))

    def discard(self) -> None:
        for tmp in self._temporaries.values():
            tmp.unlink(missing_ok=True)
        self._temporaries.clear()


def write_run(result: RunResult, output_dir: str | Path) -> Path:
    """Write the four files of a run held in memory. ``summary.json`` goes last: its presence
    marks a finished run, and a run that fails before it leaves no summary."""
    assert result.requests is not None and result.steps is not None, "already written"
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / SUMMARY_FILE).unlink(missing_ok=True)  # an older run's summary must not linger
    _atomic_write(out / CONFIG_FILE, lambda p: Path(p).write_text(config_text(result.config)))
    _atomic_write(out / REQUESTS_FILE, lambda p: pq.write_table(result.requests, p))
    _atomic_write(out / STEPS_FILE, lambda p: pq.write_table(result.steps, p))
    scaling = result.scaling
    if scaling is not None:
        _atomic_write(out / SCALING_FILE, lambda p: pq.write_table(scaling, p))
    _atomic_write(out / SUMMARY_FILE, lambda p: Path(p).write_text(to_json(result.summary)))
    return out


def config_text(config: dict[str, Any]) -> str:
    """``config.yaml``'s text."""
    return OmegaConf.to_yaml(OmegaConf.create(config))


def to_json(summary: dict[str, Any]) -> str:
    """JSON text with NaN written as null (NaN is not JSON)."""

    def clean(x: object) -> object:
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, float) and not math.isfinite(x):
            return None
        return x

    return json.dumps(clean(summary), indent=2) + "\n"
