"""What many tests share: the checkout's root, composing a config, running the command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

from sim.catalog.deployment import Deployment, build_deployment
from sim.config.compose import compose_config, load_option
from sim.output.run_files import RunResult
from tests.contract import table_problems

REPO_ROOT = Path(__file__).resolve().parents[1]
# a plan with no what-ifs and no headroom search: only the candidates' own searches
NO_WHATIFS = ("plan.step_time_scales=[]", "plan.rate_scales=[]", "plan.max_headroom=null")


def compose(*overrides: str) -> dict:
    """The resolved config of ``configs/`` with ``overrides`` (a plain dict)."""
    return compose_config(list(overrides))


def fleetcast(
    *args: str, cwd: Path | str, timeout: float = 300, check: bool = False
) -> subprocess.CompletedProcess:
    """Run ``python -m sim ARGS`` in ``cwd``; the output is text."""
    return subprocess.run(
        [sys.executable, "-m", "sim", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=check,
    )


def option(group: str, name: str) -> dict:
    """The plain config of ``configs/<group>/<name>.yaml``."""
    return load_option(group, name, group)


def deployment(
    model: str = "llama31_8b",
    hardware: str = "h100_sxm",
    tp: int = 1,
    weights: str = "bf16",
    kv: str = "bf16",
    pp: int = 1,
    ep: int = 1,
    pp_microbatches: int | None = None,
) -> Deployment:
    """One replica's deployment from catalog names, with the default memory settings."""
    return build_deployment(
        {
            "model": option("model", model),
            "hardware": option("hardware", hardware),
            "precision": {"weights": weights, "kv": kv},
            "memory": option("memory", "default"),
            "kv": {"block_size": 16, "num_blocks": None, "watermark": 0.01},
            "fleet": {
                "replicas": 1,
                "tp": tp,
                "pp": pp,
                "ep": ep,
                "pp_microbatches": pp_microbatches,
            },
        }
    )


def columns(table: pa.Table) -> dict[str, np.ndarray]:
    """A table's columns as numpy arrays (nulls become NaN, strings object arrays)."""
    return {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}


def assert_good_run(result: RunResult, kv_blocks: int | None = None) -> None:
    """The contract and the invariants hold for a run still in memory (``tests.contract``);
    ``kv_blocks`` is the (one model's) KV pool in blocks, checked when given."""
    problems = table_problems(
        result.requests,
        result.steps,
        result.summary,
        kv_blocks_per_model=None if kv_blocks is None else [kv_blocks],
    )
    assert not problems, "; ".join(problems)
