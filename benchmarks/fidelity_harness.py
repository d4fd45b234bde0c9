"""Fidelity of the roofline alone on published benchmark-harness runs of other models and GPUs.

    python benchmarks/fidelity_harness.py                  # this checkout's roofline
    python benchmarks/fidelity_harness.py --tree /tmp/old  # and another checkout's, side by side

The runs are the real result files in ``../shared/data/harness_samples`` (their README names
each file's repository, commit and licence) whose model and GPU the catalog can express:

- vLLM 0.8.3 ``benchmark_serving.py``: Llama-3.3-70B-Instruct (the shapes of Llama-3.1-70B) at
  TP 8 on 8 A100-40GB, ShareGPT, 200 prompts at 4 req/s (Poisson). The file holds every
  request's input and output length: they are replayed in order with Poisson arrivals.
- vLLM 0.8.5: Meta-Llama-3-8B-Instruct (Llama-3.1-8B's shapes) on one H100-PCIe, ShareGPT, 200
  prompts at 4 req/s. Only totals are kept, so every request gets the mean lengths (206 in,
  202 out): an approximation of ShareGPT's spread.
- SGLang ``bench_serving`` (Dec 2024): Llama-3.3-70B BF16 at TP 4 on 4 H200, random 1,024/1,024
  with ``random_range_ratio`` 0 (lengths uniform in [1, 1,024]) at 1, 2, 4, 8 and 16 req/s,
  300 s each; the runs at 8 and 16 req/s are overloaded, where throughput is the fleet's
  capacity.

Every run uses the roofline with its defaults and its engine's scheduler with that engine's
defaults (``scheduler=vllm`` or ``scheduler=sglang``; a checkout without the scheduler uses
vLLM's): no setting is taken from these files except what the harness ran (model, GPU, TP,
lengths, rate, count). Compared: mean TTFT and mean TPOT (vLLM files) and output throughput
as the harness defines them; SGLang's median ITL (the median of every inter-token gap,
pooled) against the simulated median TPOT (the median request's mean gap after its first
token), the nearest figure a run's summary holds. A checkout whose catalog lacks a GPU gets it
from the nearest entry by overrides (its datasheet bandwidth and memory in decimal GB), as a
user of that checkout would have had to.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from fidelity import json_of_script_in_tree

from sim.config.compose import compose_config
from sim.run import simulate

SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "data" / "harness_samples"
VLLM_70B = (
    "vllm_bench_serve/surajssd_llm-k8s__vllm083_llama33-70b_8xA100-40G_tp8_sharegpt_qps04.json"
)
VLLM_8B = (
    "vllm_bench_serve/IOG-Foundation__vllm085_llama3-8b_1xH100-PCIe_sharegpt_qps4_summary_only.json"
)
SGLANG_70B = "sglang_bench_serving/datacrunch__sglang_llama33-70b_4xH200_tp4_online.jsonl"

# GPUs that older checkouts lack, as overrides of the nearest entry they have (datasheet
# bandwidth; memory in decimal GB, the unit those checkouts used)
FALLBACK = {
    "a100_40g": [
        "hardware=a100_80g",
        "hardware.memory_gb=40",
        "hardware.hbm_bandwidth_gb_per_s=1555",
    ],
    "h100_pcie": [
        "hardware=h100_sxm",
        "hardware.hbm_bandwidth_gb_per_s=2000",
        "hardware.interconnect_gb_per_s=64",
        "hardware.dense_tflops.bf16=756",
        "hardware.dense_tflops.fp8=1513",
    ],
}


@dataclass
class Run:
    """One measured run: how to simulate it and what the harness reported."""

    label: str
    hardware: str
    overrides: list[str]
    measured: dict[str, float]  # metric name -> measured value (ms or tokens/s)
    trace: list[tuple[int, int]] | None = None  # per-request (input, output) lengths
    scheduler: str = "vllm"  # the engine that ran it, as a Fleetcast scheduler
    rate: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)


def runs() -> list[Run]:
    out = []
    d = json.loads((SAMPLES / VLLM_70B).read_text())
    out.append(
        Run(
            "vLLM 0.8.3, Llama-3.3-70B TP8, 8x A100-40GB, ShareGPT 4 req/s",
            "a100_40g",
            ["model=llama31_70b", "fleet.tp=8"],
            {
                "mean TTFT ms": d["mean_ttft_ms"],
                "mean TPOT ms": d["mean_tpot_ms"],
                "output tok/s": d["output_throughput"],
            },
            trace=list(zip(d["input_lens"], d["output_lens"], strict=True)),
            rate=float(d["request_rate"]),
        )
    )
    d = json.loads((SAMPLES / VLLM_8B).read_text())
    n = d["completed"]
    out.append(
        Run(
            "vLLM 0.8.5, Llama-3-8B, 1x H100-PCIe, ShareGPT 4 req/s (mean lengths)",
            "h100_pcie",
            ["model=llama31_8b", "fleet.tp=1"],
            {
                "mean TTFT ms": d["mean_ttft_ms"],
                "mean TPOT ms": d["mean_tpot_ms"],
                "output tok/s": d["output_throughput"],
            },
            trace=[(round(d["total_input_tokens"] / n), round(d["total_output_tokens"] / n))] * n,
            rate=float(d["request_rate"]),
        )
    )
    rng = np.random.default_rng(0)
    for line in (SAMPLES / SGLANG_70B).read_text().splitlines():
        d = json.loads(line.replace("Infinity", "1e999"))
        if d["dataset_name"] != "random":
            continue
        n = d["completed"]
        prompts = rng.integers(1, d["random_input_len"] + 1, size=n)  # uniform in [1, len]
        outputs = rng.integers(1, d["random_output_len"] + 1, size=n)
        out.append(
            Run(
                "SGLang, Llama-3.3-70B TP4, 4x H200, random 1024/1024"
                f" at {d['request_rate']:g} req/s",
                "h200",
                ["model=llama31_70b", "fleet.tp=4"],
                {"median ITL ms": d["median_itl_ms"], "output tok/s": d["output_throughput"]},
                trace=[(int(a), int(b)) for a, b in zip(prompts, outputs, strict=True)],
                rate=float(d["request_rate"]),
                scheduler="sglang",
            )
        )
    return out


def write_trace(run: Run, folder: Path, index: int) -> Path:
    """The run's lengths with Poisson arrivals at its rate (seeded), as a Parquet trace."""
    assert run.trace is not None
    gaps = np.random.default_rng(index).exponential(1.0 / run.rate, size=len(run.trace))
    path = folder / f"run{index}.parquet"
    pq.write_table(
        pa.table(
            {
                "arrival_time_s": np.cumsum(gaps) - gaps[0],
                "prompt_tokens": [p for p, _ in run.trace],
                "output_tokens": [o for _, o in run.trace],
            }
        ),
        path,
    )
    return path


def simulate_run(run: Run, trace: Path, tree_has_gpu: bool) -> dict[str, float]:
    hardware = [f"hardware={run.hardware}"] if tree_has_gpu else FALLBACK[run.hardware]
    from sim.resources import config_dir

    scheduler = run.scheduler
    if not (config_dir() / "scheduler" / f"{scheduler}.yaml").exists():
        scheduler = "vllm"  # an older checkout: the stand-in it had
    cfg = compose_config(
        [
            *hardware,
            *run.overrides,
            "fleet.replicas=1",
            "step_time=roofline",
            f"scheduler={scheduler}",
            "workload=trace",
            f"workload.path={trace}",
            "sim.progress=false",
        ]
    )
    s = simulate(cfg).summary
    return {
        "mean TTFT ms": s["ttft_s"]["mean"] * 1e3,
        "mean TPOT ms": s["tpot_s"]["mean"] * 1e3,
        # SGLang's median ITL pools every gap between tokens; the nearest figure the summary
        # holds is the median request's mean gap after the first token (vLLM's TPOT)
        "median ITL ms": s["tpot_s"]["p50"] * 1e3,
        "output tok/s": s["throughput"]["output_tokens_per_s"],
    }


def predictions(folder: Path) -> list[dict[str, float]]:
    from sim.resources import config_dir

    hardware = config_dir() / "hardware"
    out = []
    for i, run in enumerate(runs()):
        trace = write_trace(run, folder, i)
        out.append(simulate_run(run, trace, (hardware / f"{run.hardware}.yaml").exists()))
    return out


def other_tree(tree: str, folder: Path) -> list[dict[str, float]]:
    return json_of_script_in_tree(__file__, tree, [f"--folder={folder}"])


def report(label: str, predicted: list[dict[str, float]]) -> dict[str, list[float]]:
    """Print each run's simulated/measured ratios; return the errors per metric."""
    print(f"\nroofline only, {label} (simulated / measured - 1)")
    errors: dict[str, list[float]] = {}
    for run, sim in zip(runs(), predicted, strict=True):
        cells = []
        for metric, measured in run.measured.items():
            error = sim[metric] / measured - 1
            errors.setdefault(metric, []).append(error)
            cells.append(f"{metric} {sim[metric]:,.1f} vs {measured:,.1f} ({error:+.0%})")
        print(f"  {run.label}\n      " + "; ".join(cells))
    for metric, errs in errors.items():
        print(f"  {metric}: MAPE {np.mean(np.abs(errs)):.1%} over {len(errs)} runs")
    return errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", help="also the roofline of this checkout (PYTHONPATH=TREE)")
    parser.add_argument("--emit-json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not SAMPLES.is_dir():
        print(f"skipped: the harness samples are not at {SAMPLES}")
        return
    with tempfile.TemporaryDirectory(prefix="fleetcast_harness_") as scratch:
        folder = Path(args.folder or scratch)
        mine = predictions(folder)
        if args.emit_json:
            print(json.dumps(mine))
            return
        report("this checkout", mine)
        if args.tree:
            report(f"PYTHONPATH={args.tree}", other_tree(args.tree, folder))


if __name__ == "__main__":
    main()
