"""The compiled build (``FLEETCAST_COMPILE=1``, ``make test-compiled``) writes the same files as
the interpreted one, byte for byte, for runs that cross every compiled family: schedulers, the
prefix cache, disaggregation, speculative decoding, the frontend, a closed loop, the roofline,
calibrated and linear step times.

Run only against the compiled build: the interpreted side is a copy of the same tree without
its extension modules (``source_copy``), run with the same command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import sim.fleet.replica
from sim.signature import compiled
from tests.support import REPO_ROOT

pytestmark = pytest.mark.skipif(
    not compiled(sim.fleet.replica.__file__),
    reason="the interpreted build: make test-compiled runs this against the compiled one",
)

RUNS = {
    "default": ["workload.num_requests=600"],
    "sglang": ["scheduler=sglang", "workload.num_requests=400"],
    "trtllm_calibrated_speculative": [
        "scheduler=trtllm",
        "step_time=calibrated",
        "spec_decode.num_draft_tokens=3",
        "workload.num_requests=300",
    ],
    "prefix_cache": ["workload=mooncake_conv", "kv.prefix_caching=true", "workload.duration_s=120"],
    "disaggregated": [
        "placement=disaggregated",
        "placement.prefill.replicas=1",
        "workload.num_requests=400",
    ],
    "sarathi_frontend": [
        "scheduler=sarathi",
        "frontend.token_s=0.00125",
        "workload.num_requests=300",
    ],
    "static_linear": ["scheduler=static", "step_time=linear", "workload.num_requests=300"],
    "prefill_first_closed_loop": [
        "scheduler=prefill_first",
        "workload=closed_loop",
        "workload.concurrency=16",
        "workload.num_requests=300",
    ],
}
FILES = ("requests.parquet", "steps.parquet", "summary.json")  # (config.yaml names its folder)


def _run(tree: Path, overrides: list[str], folder: Path) -> dict[str, bytes]:
    done = subprocess.run(
        [sys.executable, "-m", "sim", *overrides, f"output_dir={folder}", "sim.progress=false"],
        cwd=folder.parent,
        env=dict(os.environ, PYTHONPATH=str(tree)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {name: (folder / name).read_bytes() for name in FILES}


@pytest.mark.parametrize("name", list(RUNS))
def test_the_compiled_build_writes_the_same_files(name, source_copy, tmp_path):
    assert not list((source_copy / "sim").rglob("*.so")), "the copy must be interpreted"
    compiled = _run(REPO_ROOT, RUNS[name], tmp_path / "compiled")
    interpreted = _run(source_copy, RUNS[name], tmp_path / "interpreted")
    for file in FILES:
        assert compiled[file] == interpreted[file], f"{name}: {file} differs"
