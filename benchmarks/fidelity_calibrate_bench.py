"""Fidelity per data set of measured benchmark runs: the roofline's defaults, then after
``fleetcast calibrate --bench`` on the other data sets, and (where a data set has three runs
or more) after calibrating on its own runs with every third held out.

    python benchmarks/fidelity_calibrate_bench.py [--max-evals 80] [--jobs N]

The data sets are the shipped benchmark result files (data/harness_samples/, their README
names each file's repository, commit and licence) whose model and GPU the catalog expresses:

- vLLM 0.8.3 ``benchmark_serving.py``, Llama-3.3-70B (Llama-3.1-70B's shapes) TP 8 on 8
  A100-40GB, ShareGPT, 200 prompts at 4 req/s: 1 run, per-request lengths replayed;
- vLLM 0.8.5, Meta-Llama-3-8B (Llama-3.1-8B's shapes) on one H100-PCIe, ShareGPT, 200 prompts
  at 4 req/s: 1 run, mean lengths only;
- SGLang ``bench_serving`` (Dec 2024), Llama-3.3-70B TP 4 on 4 H200: 7 runs (random
  1,024/1,024 at 1-16 req/s, ShareGPT at 4 and 8 req/s).

Each run is simulated as its harness ran it (``sim.harness.replay``; vLLM's files with
``scheduler=vllm``, SGLang's with ``scheduler=sglang``), and scored in the file's own
definitions: TTFT and TPOT (mean, or median where the file keeps no mean; SGLang's median ITL
where it keeps no TPOT) and output throughput. "Other data sets" fits on every run of the
other files (and then on those of the same harness and engine only) and applies the terms as
overrides (a profile refuses a deployment it was not
fitted on; this measures what the terms are worth when they are carried over anyway).
The GuideLLM and AIPerf samples are left out: their model (``example_model``) and GPU (not
recorded) cannot be expressed.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from sim.calibration.bench_fit import fit, simulate_runs
from sim.calibration.bench_runs import REPORTED, BenchRun, errors, prepare

DATA_SETS = {
    "vLLM 70B TP8 A100-40GB": (
        "shipped:harness_samples/surajssd_llm-k8s__vllm083_llama33-70b_8xA100-40G_tp8_sharegpt"
        "_qps04.json",
        ["model=llama31_70b", "hardware=a100_40g", "fleet.tp=8"],
    ),
    "vLLM 8B H100-PCIe": (
        "shipped:harness_samples/IOG-Foundation__vllm085_llama3-8b_1xH100-PCIe_sharegpt_qps4"
        "_summary_only.json",
        ["model=llama31_8b", "hardware=h100_pcie", "fleet.tp=1"],
    ),
    "SGLang 70B TP4 H200": (
        "shipped:harness_samples/datacrunch__sglang_llama33-70b_4xH200_tp4_online.jsonl",
        ["model=llama31_70b", "hardware=h200", "fleet.tp=4"],
    ),
}
NAMES = {"ttft": "TTFT", "tpot": "TPOT", "output_throughput": "output tok/s"}


def _row(label: str, runs: list[BenchRun], figures: list) -> str:
    found = errors(runs, figures)
    cells = [
        f"{NAMES[m]} {found[m]['mape']:6.1%}" if m in found else f"{NAMES[m]}    n/a"
        for m in REPORTED
    ]
    return f"    {label:<58}" + "   ".join(cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-evals", type=int, default=80)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fleetcast_fidelity_") as scratch:
        folder = Path(scratch)
        # each data set's length files in a folder of its own (prepare names them by position)
        every = {
            name: prepare([(path, own)], [], folder / f"set{i}", holdout_every=0)
            for i, (name, (path, own)) in enumerate(DATA_SETS.items())
        }
        print("MAPE per data set (simulated vs measured, in each file's definitions)")
        for name, runs in every.items():
            print(f"  {name} ({len(runs)} run{'s' if len(runs) > 1 else ''})")
            print(_row("roofline defaults", runs, simulate_runs(runs, {}, args.jobs)))
            others = [r for other, rs in every.items() if other != name for r in rs]
            terms = fit(others, max_evals=args.max_evals, jobs=args.jobs).profile.terms
            print(
                _row(
                    "calibrate --bench on the other data sets",
                    runs,
                    simulate_runs(runs, terms, args.jobs),
                )
            )
            engine = runs[0].measured.tool
            same = [r for r in others if r.measured.tool == engine]
            if same:
                terms = fit(same, max_evals=args.max_evals, jobs=args.jobs).profile.terms
                print(
                    _row(
                        f"calibrate --bench on the other {engine} data",
                        runs,
                        simulate_runs(runs, terms, args.jobs),
                    )
                )
            if len(runs) >= 3:
                path, own = DATA_SETS[name]
                split = prepare([(path, own)], [], folder / "own", holdout_every=3)
                result = fit(split, max_evals=args.max_evals, jobs=args.jobs)
                held = [i for i, r in enumerate(split) if r.held_out]
                print(
                    _row(
                        f"calibrate --bench on its own runs: {len(held)} held out",
                        [split[i] for i in held],
                        [result.fitted_figures[i] for i in held],
                    )
                )
                print(
                    _row(
                        "  (the same held-out runs, roofline defaults)",
                        [split[i] for i in held],
                        [result.default_figures[i] for i in held],
                    )
                )


if __name__ == "__main__":
    main()
