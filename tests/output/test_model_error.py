"""The step-time error bands (sim/output/model_error.py): the table built from validation
rows, the lookup's fallback order, a deployment's class, a bench profile's own band, the
MLPerf throughput rows as a source (data/mlperf/server_predictions.csv), and the shipped table
rebuilt from the shipped rows (benchmarks/model_error_bands.py --check)."""

from __future__ import annotations

import csv
import importlib.util
import sys

import pytest

from sim.engine.step_time.bench_profile import BenchProfile
from sim.output.model_error import (
    ANY,
    BAND_COLUMNS,
    CLASS_KEYS,
    MIN_ROWS,
    QUANTITY,
    band_for,
    build_bands,
    deployment_class,
    gpu_family,
    lookup,
    read_bands,
    write_bands,
)
from tests.support import REPO_ROOT, compose

H100_TP2 = {
    "step_time_model": "roofline",
    "engine": "vllm",
    "gpu_family": "H100",
    "tp": "2",
    "precision": "fp8",
}


def _builder():
    spec = importlib.util.spec_from_file_location(
        "model_error_bands", REPO_ROOT / "benchmarks" / "model_error_bands.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _rows(klass: dict[str, str], ratios: list[float], source: str = "s") -> list[dict]:
    return [{**klass, "ratio": r, "source": source} for r in ratios]


def test_a_class_needs_min_rows_and_its_quantiles_are_numpys_linear_ones():
    tenths = [i / 10 for i in range(1, MIN_ROWS + 1)]  # 0.1 ... 1.0
    table = build_bands(_rows(H100_TP2, tenths))
    # ten rows make a band at every level, each the same ten
    assert len(table) == 6
    exact = next(r for r in table if ANY not in [r[k] for k in CLASS_KEYS])
    assert (exact["n"], exact["p10"], exact["p50"], exact["p90"]) == (10, 0.19, 0.55, 0.91)
    # nine rows of another TP: too few for their own class; they join the coarser ones
    table = build_bands(_rows(H100_TP2, tenths) + _rows({**H100_TP2, "tp": "4"}, [2.0] * 9))
    assert not [r for r in table if r["tp"] == "4"]
    any_tp = next(r for r in table if r["tp"] == ANY and r["precision"] == "fp8")
    assert any_tp["n"] == 19 and any_tp["p90"] == 2.0


def _table_row(n: int, p50: float, **klass: str) -> dict[str, str]:
    row = {k: klass.get(k, ANY) for k in CLASS_KEYS}
    return {**row, "n": str(n), "p10": "0.9", "p50": str(p50), "p90": "1.5", "source": "t"}


def test_the_lookup_falls_back_from_the_exact_class_to_coarser_ones_in_order():
    exact = dict(H100_TP2)
    levels = [
        (_table_row(11, 1.01, **exact), "exact class"),
        (
            _table_row(
                12,
                1.02,
                **{k: exact[k] for k in ("step_time_model", "engine")}
                | {"gpu_family": "H100", "precision": "fp8"},
            ),
            "any tp",
        ),
        (
            _table_row(13, 1.03, step_time_model="roofline", engine="vllm", gpu_family="H100"),
            "any tp, any precision",
        ),
        (
            _table_row(14, 1.04, step_time_model="roofline", gpu_family="H100"),
            "any engine, any tp, any precision",
        ),
        (
            _table_row(15, 1.05, step_time_model="roofline", engine="vllm"),
            "any gpu_family, any tp, any precision",
        ),
        (
            _table_row(16, 1.06, step_time_model="roofline"),
            "any engine, any gpu_family, any tp, any precision",
        ),
    ]
    table = [row for row, _ in levels]
    # another model's band never answers
    table.append(_table_row(99, 9.0, step_time_model="calibrated"))
    for row, level in levels:
        band = lookup(exact, table)
        assert band is not None
        assert (band.n, band.p50, band.level()) == (int(row["n"]), float(row["p50"]), level)
        assert band.klass == exact
        table.remove(row)  # the next lookup falls one level further
    assert lookup(exact, table) is None  # no row of the roofline left


def test_a_deployments_class_comes_from_its_config():
    assert deployment_class(compose()) == {
        "step_time_model": "roofline",
        "engine": "vllm",
        "gpu_family": "H100",
        "tp": "1",
        "precision": "bf16",
    }
    cfg = compose(
        "hardware=a100_40g",
        "fleet.tp=4",
        "scheduler=sglang",
        "precision.weights=fp8",
        "step_time=calibrated",
    )
    assert deployment_class(cfg) == {
        "step_time_model": "calibrated",
        "engine": "sglang",
        "gpu_family": "A100",
        "tp": "4",
        "precision": "fp8",
    }
    assert [gpu_family(n) for n in ("H100-SXM", "A100-40G-SXM", "H200", "h100_pcie")] == [
        "H100",
        "A100",
        "H200",
        "H100",
    ]


def test_a_bench_profile_answers_with_its_own_held_out_runs(tmp_path):
    def record(held_out: bool, measured: float, calibrated: float) -> dict:
        return {
            "held_out": held_out,
            "measured": {"tpot": measured},
            "calibrated": {"tpot": calibrated},
        }

    runs = [record(False, 0.02, 0.01), record(True, 0.012, 0.010), record(True, 0.018, 0.020)]
    profile = BenchProfile(
        terms={"step_overhead_s": 0.001},
        fitted_for=[
            {
                "model": "meta-llama/Llama-3.1-8B",
                "hardware": "H100-SXM",
                "weights_precision": "bf16",
                "kv_precision": "bf16",
            }
        ],
        runs=runs,
    )
    path = profile.save(tmp_path / "mine.json")
    klass, band = band_for(compose(f"step_time.profile={path}"))
    assert klass["step_time_model"] == "bench_profile"
    assert band is not None
    # the two held-out runs only (the fitted one, 2x off, is not its error): 1.2 and 0.9
    assert band.n == 2
    assert (band.p10, band.p50, band.p90) == pytest.approx((0.93, 1.05, 1.17))
    assert band.rows == "the profile's held-out runs" and band.level() == "exact class"
    assert band.source == "mine.json, fleetcast calibrate --bench"
    # none held out: no band, whatever the shipped table holds
    BenchProfile(profile.terms, profile.fitted_for, runs=runs[:1]).save(path)
    assert band_for(compose(f"step_time.profile={path}"))[1] is None


def test_the_shipped_table_is_the_shipped_rows_bands(capsys):
    assert _builder().main(["--check"]) == 0
    assert "matches" in capsys.readouterr().out
    shipped = read_bands(REPO_ROOT / "data" / "model_error" / "bands.csv")
    # the shipped models have bands for the roofline's and the calibrated profiles' runs
    assert lookup(deployment_class(compose()), shipped) is not None
    assert lookup(deployment_class(compose("step_time=calibrated")), shipped) is not None


def test_a_throughput_at_slo_table_is_a_source_of_rows(tmp_path):
    builder = _builder()
    path = tmp_path / "mlperf_rows.csv"
    columns = [
        "round",
        "benchmark",
        "accelerator",
        "hardware",
        "scheduler",
        "precision",
        "tp",
        "measured_samples_per_s",
        "predicted_samples_per_s",
        "error",
    ]
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        writer.writerow(
            ["v5.0", "llama2-70b", "H200-SXM", "h200", "trtllm", "fp8", "8", "40", "50", "0.25"]
        )
        writer.writerow(
            ["v5.0", "llama2-70b", "H200-SXM", "h200", "trtllm", "fp8", "8", "40", "", ""]
        )  # not expressible: no prediction, no row
    (row,) = builder.read_rows(path)
    assert row["ratio"] == 1.25  # capacity ~ 1 / step time: predicted / measured throughput
    assert {k: row[k] for k in CLASS_KEYS} == {
        "step_time_model": "roofline",
        "engine": "trtllm",
        "gpu_family": "H200",
        "tp": "8",
        "precision": "fp8",
    }
    assert row["held_out"] is True


def _throughput_table(path, rows: list[tuple[str, str, str, str, str, str]]) -> None:
    """A small table in ``fidelity_mlperf.py --csv``'s columns: (row id, round, held_out,
    tp, measured, predicted) per row, every row Llama 2 70B FP8 TRT-LLM on H100-SXM."""
    columns = [
        "row_id", "round", "held_out", "benchmark", "accelerator", "hardware", "scheduler",
        "precision", "tp", "measured_samples_per_s", "predicted_samples_per_s",
    ]  # fmt: skip
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for row_id, round_, held_out, tp, measured, predicted in rows:
            writer.writerow(
                [row_id, round_, held_out, "llama2-70b-99", "NVIDIA H100-SXM-80GB",
                 "h100_sxm", "trtllm", "fp8", tp, measured, predicted]
            )  # fmt: skip


def test_mlperf_rows_give_bands_of_predicted_over_measured_throughput(tmp_path):
    builder = _builder()
    path = tmp_path / "predictions.csv"
    # ten held-out rows, measured 10 samples/s, predicted 10 ... 19: r = 1.0 ... 1.9;
    # three rows developed on (r = 5) and one with no prediction must not count
    held = [(f"v4.0/s/{i}", "v4.0", "True", "2", "10", str(10 + i)) for i in range(10)]
    developed = [(f"v4.1/s/{i}", "v4.1", "False", "2", "10", "50") for i in range(3)]
    _throughput_table(path, [*held, *developed, ("v4.0/s/x", "v4.0", "True", "2", "10", "")])
    rows = builder.read_rows(path, "mlperf")
    assert len(rows) == 13 and sum(r["held_out"] for r in rows) == 10
    assert rows[0]["run"] == "v4.0/s/0" and rows[0]["gpu_family"] == "H100"
    # a prediction too fast (r > 1) is a step time too short: the slow side, as TPOT's
    assert [r["ratio"] for r in rows[:10]] == pytest.approx([1 + i / 10 for i in range(10)])
    text = builder.bands_text(rows)
    table = list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))
    exact = {k: v for k, v in H100_TP2.items() if k != "engine"} | {"engine": "trtllm"}
    (band,) = [r for r in table if all(r[k] == exact[k] for k in CLASS_KEYS)]
    # numpy's linear quantiles of 1.0 ... 1.9 by hand: positions 0.9, 4.5 and 8.1 of 0 ... 9
    assert (band["n"], band["p10"], band["p50"], band["p90"]) == ("10", "1.09", "1.45", "1.81")
    assert band["source"] == "mlperf"
    # every level has the same ten rows, so six bands, all alike
    assert len(table) == 6 and {(r["n"], r["p50"]) for r in table} == {("10", "1.45")}


def test_the_shipped_mlperf_predictions_are_the_expressible_rows(capsys):
    from sim.harness.mlperf import HELD_OUT_ROUNDS, load_results
    from sim.harness.mlperf_configs import map_result

    builder = _builder()
    path = REPO_ROOT / "data" / "mlperf" / "server_predictions.csv"
    with path.open(newline="") as f:
        given = list(csv.DictReader(f))
    results = {f"{r.round}/{r.submitter}/{r.system}/{r.benchmark}": r for r in load_results()}
    expressible = {k for k, r in results.items() if map_result(r).expressible}
    assert {r["row_id"] for r in given} <= expressible
    for r in given:
        result = results[r["row_id"]]
        assert float(r["measured_samples_per_s"]) == result.completed_samples_per_s
        assert (r["held_out"] == "True") == (result.round in HELD_OUT_ROUNDS)
        ratio = float(r["predicted_samples_per_s"]) / float(r["measured_samples_per_s"])
        assert float(r["ratio"]) == pytest.approx(ratio, abs=5e-5)
    rows = builder.read_rows(path, builder.MLPERF_SOURCE)
    assert len(rows) == len(given)  # every shipped row has a prediction
    held = [r for r in rows if r["held_out"]]
    # the held-out round's rows that map: Llama 2 70B, FP8, TRT-LLM at TP 2 on H100 SXM/PCIe
    assert len(held) == sum(1 for k in expressible if results[k].round in HELD_OUT_ROUNDS)
    assert {tuple(r[k] for k in CLASS_KEYS) for r in held} == {
        ("roofline", "trtllm", "H100", "2", "fp8")
    }
    shipped = read_bands(REPO_ROOT / "data" / "model_error" / "bands.csv")
    band = lookup(
        {"step_time_model": "roofline", "engine": "trtllm", "gpu_family": "H100", "tp": "2",
         "precision": "fp8"},
        shipped,
    )  # fmt: skip
    assert band is not None and band.level() == "exact class" and band.n == len(held)
    assert band.source == builder.MLPERF_SOURCE


def test_a_written_table_reads_back(tmp_path):
    table = build_bands(_rows(H100_TP2, [1.0 + i / 100 for i in range(12)]))
    write_bands(table, tmp_path / "b.csv", "a header\nof two lines")
    text = (tmp_path / "b.csv").read_text()
    assert text.startswith("# a header\n# of two lines\n" + ",".join(BAND_COLUMNS) + "\n")
    again = read_bands(tmp_path / "b.csv")
    assert [lookup(H100_TP2, again)] == [
        lookup(H100_TP2, [{k: str(v) for k, v in r.items()} for r in table])
    ]


def test_a_runs_summary_carries_its_band_only_when_asked(tmp_path):
    from sim.output.summary_table import format_summary
    from sim.run import simulate

    small = ("workload=poisson", "workload.num_requests=20", "sim.progress=false")
    plain = simulate(compose(*small, "fleet.tp=2")).summary
    assert "model_error" not in plain  # off by default: summary.json as before
    cfg = compose(*small, "fleet.tp=2", "+output.model_error=true")
    summary = simulate(cfg).summary
    block = summary["model_error"]
    shipped = read_bands(REPO_ROOT / "data" / "model_error" / "bands.csv")
    expected = lookup(deployment_class(cfg), shipped)
    assert expected is not None
    assert block == {"class": deployment_class(cfg), "band": expected.json(), "note": None}
    assert block["class"]["tp"] == "2"
    line = next(li for li in format_summary(summary, cfg).splitlines() if "model error" in li)
    assert line.startswith(
        f"model error: {QUANTITY} p50 x{expected.p50:.3g}, "
        f"p90 x{expected.p90:.3g}; band of n {expected.n} ("
    )
    # a step-time model without validation rows says so
    cfg = compose(*small, "step_time=constant", "+output.model_error=true")
    assert simulate(cfg).summary["model_error"] == {
        "class": deployment_class(cfg),
        "band": None,
        "note": "no validation rows for step_time_model constant: no measured error band",
    }
