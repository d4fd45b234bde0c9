"""The step-time model's error bands: per-run validation rows, then the shipped bands table.

    python benchmarks/model_error_bands.py --rows      # simulate the validation runs (~10 min)
    python benchmarks/model_error_bands.py --mlperf    # predict the MLPerf rows again (~3 min)
    python benchmarks/model_error_bands.py             # rebuild data/model_error/bands.csv
    python benchmarks/model_error_bands.py --check     # the shipped table is the rows' (exit 1)
    python benchmarks/model_error_bands.py --source extra.csv   # rows from another source too

Each row is one measured run, simulated: its class (step-time model, engine, GPU family, TP,
weight precision) and ``ratio``, the multiple of every step time that brings the simulation
to the measurement (``sim.output.model_error`` says why). The rows come from:

- the 177 measured H100-SXM TRT-LLM runs of Llama-3.1-8B (``benchmarks/fidelity.py``), each
  simulated with the calibrated TRT-LLM profile and with the roofline, as fidelity.py does:
  ``ratio`` = measured / simulated mean TPOT. fidelity.py's global terms were fitted on the
  even-numbered runs, so only the odd-numbered (held-out) runs enter the bands: ``held_out``
  in the rows (``data/model_error/rows.csv``);
- the published harness runs (``benchmarks/fidelity_harness.py``: vLLM on A100-40GB and
  H100-PCIe, SGLang on H200), with the roofline; nothing was fitted on them, so every one is
  held out. SGLang's file keeps the median ITL, compared with the simulated median TPOT. These
  and the 177 are ``rows.csv`` (``--rows``);
- the MLPerf Server results (``data/mlperf/server_predictions.csv``, written by
  ``benchmarks/fidelity_mlperf.py --csv``; ``--mlperf`` runs it again), with the roofline:
  each row's throughput at the SLO, predicted by the capacity search and measured, and
  ``ratio`` = predicted / measured throughput (``sim.output.model_error
  .ratio_from_throughput``: capacity ~ 1 / step time, so a prediction too fast, r > 1, is a
  step time too short, as r > 1 is for TPOT). Nothing is fitted to any row, but the way the
  benchmark describes the runs was developed on round v4.1 (``sim.harness.mlperf
  .DEVELOPMENT_ROUNDS``): only the held-out round's rows (v4.0, ``HELD_OUT_ROUNDS``) have
  ``held_out`` true and enter the bands; v4.1's ship beside them, marked.

``--source FILE`` adds rows of another CSV: either rows in ``rows.csv``'s columns, or a
throughput-at-SLO table in ``fidelity_mlperf.py --csv``'s columns (``measured_samples_per_s``
and ``predicted_samples_per_s``; ``hardware`` or else ``accelerator``, ``scheduler``,
``precision`` and ``tp`` give the class; without a ``held_out`` column every row is held out).
The bands are built only from held-out rows; ``--check`` rebuilds them from the shipped rows
and compares the text with the shipped table.
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
from pathlib import Path
from typing import Any

from sim.output.model_error import (
    CLASS_KEYS,
    build_bands,
    gpu_family,
    ratio_from_throughput,
    write_bands,
)
from sim.resources import data_dir

FOLDER = data_dir() / "model_error"
ROWS = FOLDER / "rows.csv"
BANDS = FOLDER / "bands.csv"
MLPERF = data_dir() / "mlperf" / "server_predictions.csv"
ROW_COLUMNS = (*CLASS_KEYS, "source", "run", "held_out", "measured", "predicted", "ratio")
H100_SOURCE = "177 H100-SXM TRT-LLM runs (benchmarks/fidelity.py)"
HARNESS_SOURCE = "harness samples (benchmarks/fidelity_harness.py)"
MLPERF_SOURCE = "MLPerf Server results (benchmarks/fidelity_mlperf.py)"
HEADER = (
    "Step-time error bands: ratio = measured / simulated mean TPOT per validation run, or\n"
    "predicted / measured throughput at the SLO (MLPerf): the multiple on step time\n"
    "(sim/output/model_error.py); held-out rows of data/model_error/rows.csv and\n"
    "data/mlperf/server_predictions.csv.\n"
    "Built by: python benchmarks/model_error_bands.py (--check compares)"
)
TRUE = ("True", "true", "1")


def h100_rows() -> list[dict[str, Any]]:
    """The 177 runs, calibrated and roofline (fidelity.py's Setup, its fitted server terms)."""
    from dataclasses import replace

    import pandas as pd
    from fidelity import ROOFLINE, RUNS, Setup, simulate_all

    runs = pd.read_csv(RUNS)
    out = []
    for model, setup in (("calibrated", Setup()), ("roofline", replace(Setup(), profile=ROOFLINE))):
        sim = simulate_all(runs, setup, 10)
        for i, row in enumerate(runs.to_dict("records")):
            measured, predicted = float(row["measured_tpot_ms"]), float(sim[i, 1])
            out.append(
                {
                    "step_time_model": model,
                    "engine": "trtllm",
                    "gpu_family": gpu_family(str(row["system"])),
                    "tp": str(row["tp_size"]),
                    "precision": "bf16",
                    "source": H100_SOURCE,
                    "run": row["id"],
                    "held_out": i % 2 == 1,  # fidelity.py --fit uses the even-numbered runs
                    "measured": measured,
                    "predicted": predicted,
                    "ratio": measured / predicted,
                }
            )
    return out


def harness_rows() -> list[dict[str, Any]]:
    """The harness samples, with the roofline (fidelity_harness.py's runs)."""
    from fidelity_harness import SAMPLES, predictions, runs

    if not SAMPLES.is_dir():
        print(f"skipped: the harness samples are not at {SAMPLES}", file=sys.stderr)
        return []
    with tempfile.TemporaryDirectory(prefix="fleetcast_bands_") as scratch:
        predicted = predictions(Path(scratch))
    out = []
    for run, sim in zip(runs(), predicted, strict=True):
        metric = "mean TPOT ms" if "mean TPOT ms" in run.measured else "median ITL ms"
        tp = next(o.split("=")[1] for o in run.overrides if o.startswith("fleet.tp="))
        out.append(
            {
                "step_time_model": "roofline",
                "engine": run.scheduler,
                "gpu_family": gpu_family(run.hardware),
                "tp": tp,
                "precision": "bf16",
                "source": HARNESS_SOURCE,
                "run": run.label,
                "held_out": True,
                "measured": run.measured[metric],
                "predicted": sim[metric],
                "ratio": run.measured[metric] / sim[metric],
            }
        )
    return out


def read_rows(path: Path, source: str | None = None) -> list[dict[str, Any]]:
    """Rows of ``path``: this script's columns, or a throughput-at-SLO table (module
    docstring), whose rows without a prediction (not expressible) are left out. ``source``
    names a throughput table's rows (default: the file's name)."""
    with path.open(newline="") as f:
        given = list(csv.DictReader(f))
    if not given or "measured_samples_per_s" not in given[0]:
        return [{**r, "held_out": r["held_out"] in TRUE} for r in given]
    source = source or f"{path.name} (throughput at the SLO)"
    return [
        {
            "step_time_model": r.get("step_time_model") or "roofline",
            "engine": r["scheduler"],
            "gpu_family": gpu_family(r.get("hardware") or r["accelerator"]),
            "tp": str(r["tp"]),
            "precision": r["precision"],
            "source": source,
            "run": r.get("row_id")
            or f"{r.get('round', '')} {r.get('benchmark', '')} {r.get('hardware', '')}",
            "held_out": r.get("held_out", "True") in TRUE,
            "measured": float(r["measured_samples_per_s"]),
            "predicted": float(r["predicted_samples_per_s"]),
            "ratio": ratio_from_throughput(
                float(r["measured_samples_per_s"]), float(r["predicted_samples_per_s"])
            ),
        }
        for r in given
        if r.get("predicted_samples_per_s") and r.get("measured_samples_per_s")
    ]


def mlperf_rows(regenerate: bool = False) -> list[dict[str, Any]]:
    """The MLPerf rows (``MLPERF``), predicted again first if ``regenerate``; none when the
    file is not there."""
    if regenerate:
        from fidelity_mlperf import main as predict_mlperf

        predict_mlperf(["--csv", str(MLPERF)])
    if not MLPERF.is_file():
        print(f"skipped: no MLPerf predictions at {MLPERF}", file=sys.stderr)
        return []
    return read_rows(MLPERF, MLPERF_SOURCE)


def write_rows(rows: list[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=ROW_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow(
                {k: f"{row[k]:.6g}" if isinstance(row[k], float) else row[k] for k in ROW_COLUMNS}
            )


def bands_text(rows: list[dict[str, Any]]) -> str:
    with tempfile.TemporaryDirectory(prefix="fleetcast_bands_") as scratch:
        path = Path(scratch) / "bands.csv"
        write_bands(build_bands(r for r in rows if r["held_out"]), path, HEADER)
        return path.read_text()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", action="store_true", help="simulate the validation runs first")
    parser.add_argument("--mlperf", action="store_true", help="predict the MLPerf rows first")
    parser.add_argument("--check", action="store_true", help="compare with the shipped table")
    parser.add_argument("--source", action="append", default=[], help="rows of another CSV")
    args = parser.parse_args(argv)
    if args.rows:
        write_rows([*h100_rows(), *harness_rows()], ROWS)
    rows = [*read_rows(ROWS), *mlperf_rows(args.mlperf)]
    for extra in args.source:
        rows += read_rows(Path(extra))
    text = bands_text(rows)
    if args.check:
        same = BANDS.is_file() and BANDS.read_text() == text
        print(f"{BANDS}: {'matches' if same else 'differs from'} the rows' bands")
        return 0 if same else 1
    BANDS.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
