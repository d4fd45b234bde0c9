"""The files of a run's folder (docs/reference/outputs.md): named once, written once, never
half-written.

Each file is written through a temporary file in the same folder (``.NAME.XXXX.partial``) and
renamed into place, so a reader never sees half a file. A long run streams its tables into
their temporaries while it runs (``RunFolder``). ``summary.json`` is written last, so its
presence marks a finished run; a sweep job that failed on a bad configuration leaves
``error.txt`` instead. A run killed midway leaves temporaries, which the next run into the
folder removes (``remove_temporaries``).

A folder holds one run at a time, and only its files. A run takes the folder's lock
(``LOCK_FILE``, an ``flock`` on a file holding its pid) before it removes or writes anything:
a second run into the folder while the first writes is refused in one line naming the first's
pid (two runs writing the same files would lose one while both said their files were
written). The lock goes with the process that held it, so a killed run leaves no lock to
clear by hand. With the lock, the folder's earlier run is removed whole (``RUN_FILES``, the
summary first), so a run killed midway leaves only its own files and no summary, and a run
that finishes has no earlier run's file beside its own (a fixed fleet's run after an
autoscaled one: no ``scaling.parquet``). ``.hydra/`` is left to the command that writes it.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from omegaconf import OmegaConf

from sim.errors import ConfigError

CONFIG_FILE = "config.yaml"
REQUESTS_FILE = "requests.parquet"
STEPS_FILE = "steps.parquet"
SUMMARY_FILE = "summary.json"
SCALING_FILE = "scaling.parquet"  # an autoscaled fleet's changes (sim.output.scaling)
FAULTS_FILE = "faults.parquet"  # a fleet with faults: its events (sim.output.faults)
ERROR_FILE = "error.txt"
# a run's files, the summary first: removed in this order, no summary is left beside a part
# of the run it summed up
RUN_FILES = (
    SUMMARY_FILE,
    CONFIG_FILE,
    REQUESTS_FILE,
    STEPS_FILE,
    SCALING_FILE,
    FAULTS_FILE,
    ERROR_FILE,
)
# summary.json's counts, whole numbers (a sweep's runs.parquet keeps them as int64, a report
# refuses a summary where one is not)
SUMMARY_COUNTS = (
    "num_requests",
    "warmup_requests",
    "completed",
    "rejected",
    "unfinished",
    "num_preemptions",
    "num_steps",
    "num_replicas",
    "num_gpus",
    "kv_capacity_tokens",
)
LOCK_FILE = ".fleetcast.lock"  # held (flock) by the run writing into the folder; its pid


@dataclass
class RunResult:
    """What one run produced: the two tables (None when they went straight to a run folder),
    the summary, the resolved config, and what each rejection reason means for this fleet."""

    requests: pa.Table | None
    steps: pa.Table | None
    summary: dict
    config: dict
    rejection_texts: dict[str, str] = field(default_factory=dict)
    # the fleet's own files, by name (an autoscaled fleet's ``scaling.parquet``)
    tables: dict[str, pa.Table] = field(default_factory=dict)

    @property
    def scaling(self) -> pa.Table | None:
        """An autoscaled fleet's changes (``sim.output.scaling``); None for another fleet."""
        return self.tables.get(SCALING_FILE)

    @property
    def faults(self) -> pa.Table | None:
        """A fleet with faults: its events (``sim.output.faults``); None for another fleet."""
        return self.tables.get(FAULTS_FILE)


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


def remove_run_files(folder: Path) -> None:
    """Delete the run in ``folder`` (``RUN_FILES``, the summary first, and the temporaries a
    killed run left): what a new run does, holding the lock, before it writes anything."""
    for name in RUN_FILES:
        (folder / name).unlink(missing_ok=True)
    remove_temporaries(folder)


def lock_folder(folder: Path) -> int:
    """Take ``folder``'s lock (``LOCK_FILE``) for this process: the open file, whose closing
    (``unlock_folder``, or the process's end) releases it. A ConfigError on ``output_dir``
    naming the holder's pid while another live process holds it."""
    import fcntl  # (POSIX: the systems Fleetcast runs on)

    path = folder / LOCK_FILE
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise ConfigError(
                "output_dir",
                str(folder),
                f"another run (pid {holder}) is writing into this folder; wait for it to "
                "end, or give another output_dir",
            ) from None
        try:
            current = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            current = False
        if current:
            break
        os.close(fd)  # its holder removed the file between our open and our lock: again
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def unlock_folder(folder: Path, fd: int) -> None:
    """Release the lock ``lock_folder`` took, removing its file first (a process that opened
    the removed file sees, once it has the lock, that the path is no longer it, and retries)."""
    (folder / LOCK_FILE).unlink(missing_ok=True)
    os.close(fd)


class RunFolder:
    """A run's folder while the run writes into it: locked against another run, the earlier
    run removed from the start (``remove_run_files``: a run that fails must not leave an older
    run's summary looking like its own, nor its files beside its own), temporaries that
    ``commit`` renames into place, ``discard`` for whatever was not committed, and ``close``
    at the end (what was not committed discarded, the lock released)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock: int | None = lock_folder(self.path)
        remove_run_files(self.path)
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

    def close(self) -> None:
        """The run has ended (finished or not): discard, and release the folder."""
        self.discard()
        if self._lock is not None:
            unlock_folder(self.path, self._lock)
            self._lock = None


def write_run(result: RunResult, output_dir: str | Path) -> Path:
    """Write the files of a run held in memory (a ``RunFolder``: the folder locked, its
    earlier run removed): its four, and the fleet's own (an autoscaled fleet's
    ``scaling.parquet``). ``summary.json`` goes last: its presence marks a finished run, and a
    run that fails before it leaves no summary."""
    assert result.requests is not None and result.steps is not None, "already written"
    out = Path(output_dir)
    folder = RunFolder(out)
    try:
        folder.write(CONFIG_FILE, config_text(result.config))
        _atomic_write(out / REQUESTS_FILE, lambda p: pq.write_table(result.requests, p))
        _atomic_write(out / STEPS_FILE, lambda p: pq.write_table(result.steps, p))
        for name, table in result.tables.items():
            _atomic_write(out / name, partial(pq.write_table, table))
        folder.write(SUMMARY_FILE, to_json(result.summary))
    finally:
        folder.close()
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
