"""A real 2x2x2 sweep, run once for the sweep tests that read it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TINY = [
    "workload=poisson",
    "workload.num_requests=30",
    "workload.qps=20",
    "workload.prompt_tokens=64",
    "workload.output_tokens=16",
    "sim.progress=false",
]
GRID = ["fleet.replicas=1,2", "precision.weights=bf16,fp8", "scheduler.max_num_seqs=8,64"]


def run_sweep(out: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``fleetcast -m GRID TINY ARGS output_dir=OUT`` in ``cwd``."""
    return subprocess.run(
        [sys.executable, "-m", "sim", "-m", *GRID, *TINY, *args, f"output_dir={out}"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.fixture(scope="session")
def finished_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """A finished sweep's folder with the command's stdout and stderr. It is run from a folder
    outside the checkout: nothing may depend on the current directory."""
    out = tmp_path_factory.mktemp("sweep") / "s"
    proc = run_sweep(out, cwd=tmp_path_factory.mktemp("elsewhere"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out, proc.stdout, proc.stderr
