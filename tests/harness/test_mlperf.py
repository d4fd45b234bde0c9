"""The shipped MLPerf Server tables: rows as the LoadGen logs state them, counts, and the
loader's checks (one-line errors naming the file, line and column)."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import pytest

from sim.errors import ConfigError
from sim.harness.mlperf import (
    BENCHMARK_COLUMNS,
    COLUMNS,
    DEVELOPMENT_ROUNDS,
    HELD_OUT_ROUNDS,
    LAST_ROUND,
    ServerResult,
    load_benchmarks,
    load_results,
    round_key,
)
from sim.resources import data_dir

RESULTS = data_dir() / "mlperf" / "server_results.csv"
V41 = "198fc46799b3328b36ee4bcbdebfa2db5a8e6183"  # mlcommons/inference_results_v4.1 HEAD
# mlcommons/inference_results_v4.0, as the tool library's index holds it (data/mlperf/README.md)
V40 = "3c4a1cf196b70175cfe7c59e067cd1d923aa4f3f"


@pytest.fixture(scope="module")
def rows() -> list[ServerResult]:
    return load_results()


def _one(rows: list[ServerResult], submitter: str, system: str, benchmark: str) -> ServerResult:
    (row,) = [
        r for r in rows if (r.submitter, r.system, r.benchmark) == (submitter, system, benchmark)
    ]
    return row


def test_nvidia_h100_llama2_row_is_its_loadgen_summary(rows):
    # closed/NVIDIA/results/DGX-H100_H100-SXM-80GBx8_TRT/llama2-70b-99/Server/performance/run_1/
    # mlperf_log_summary.txt @ v4.1's 198fc467, read by hand
    row = _one(rows, "NVIDIA", "DGX-H100_H100-SXM-80GBx8_TRT", "llama2-70b-99")
    assert row.source_path == (
        "closed/NVIDIA/results/DGX-H100_H100-SXM-80GBx8_TRT/llama2-70b-99/Server/performance/"
        "run_1/mlperf_log_summary.txt"
    )
    assert (row.round, row.commit, row.result, row.scenario) == ("v4.1", V41, "VALID", "Server")
    assert row.completed_samples_per_s == 74.42
    assert row.completed_tokens_per_s == 21605.79
    assert row.scheduled_samples_per_s == 75.10
    assert row.target_qps == 75
    assert (row.p99_ttft_ns, row.p99_tpot_ns) == (461_278_089, 175_354_317)
    assert (row.ttft_bound_ns, row.tpot_bound_ns) == (2_000_000_000, 200_000_000)
    assert row.p99_ttft_s == pytest.approx(0.461278089)
    assert row.tpot_bound_s == pytest.approx(0.2)
    # closed/NVIDIA/systems/DGX-H100_H100-SXM-80GBx8_TRT.json
    assert row.accelerator == "NVIDIA H100-SXM-80GB"
    assert (row.accelerators_per_node, row.nodes, row.accelerators_total) == (8, 1, 8)
    assert row.framework == "TensorRT 10.2.0, CUDA 12.4"
    assert row.system_name == "NVIDIA DGX H100 (8x H100-SXM-80GB, TensorRT)"
    # the measurements JSON says "fp16" with a quantization transform; the code README's
    # quantization command says --qformat fp8
    assert row.weight_data_types == "fp16"
    assert row.precision == "fp8"
    assert row.precision_source == "closed/NVIDIA/code/llama2-70b-99/tensorrt/README.md"


def test_amd_mi300x_llama2_row_is_its_loadgen_summary(rows):
    # closed/AMD/results/1xMI300X_2xEPYC-9374F/llama2-70b-99/Server/performance/run_1/
    # mlperf_log_summary.txt @ v4.1's 198fc467
    row = _one(rows, "AMD", "1xMI300X_2xEPYC-9374F", "llama2-70b-99")
    assert (row.completed_samples_per_s, row.completed_tokens_per_s) == (8.59, 2520.27)
    assert (row.scheduled_samples_per_s, row.target_qps) == (8.62, 8.6)
    assert (row.p99_ttft_ns, row.p99_tpot_ns) == (785_265_884, 190_298_723)
    assert row.accelerators_total == 1
    assert row.framework.startswith("vLLM 0.4.3")
    # AMD's measurements JSON declares fp8 itself
    assert (row.precision, row.precision_source) == ("fp8", "measurements weight_data_types")


def test_nvidia_h100_mixtral_row_is_its_loadgen_summary(rows):
    # closed/NVIDIA/results/DGX-H100_H100-SXM-80GBx8_TRT/mixtral-8x7b/Server/performance/run_1/
    # mlperf_log_summary.txt @ v4.1's 198fc467
    row = _one(rows, "NVIDIA", "DGX-H100_H100-SXM-80GBx8_TRT", "mixtral-8x7b")
    assert (row.completed_samples_per_s, row.completed_tokens_per_s) == (348.06, 50795.57)
    assert (row.scheduled_samples_per_s, row.target_qps) == (348.37, 348)
    assert (row.p99_ttft_ns, row.p99_tpot_ns) == (628_885_054, 123_136_641)
    assert (row.precision, row.precision_source) == (
        "fp8",
        "closed/NVIDIA/code/mixtral-8x7b/tensorrt/README.md",
    )


def test_counts_per_round_and_benchmark(rows):
    assert Counter((r.round, r.benchmark) for r in rows) == {
        ("v4.0", "llama2-70b-99.9"): 21,  # the index keeps one of each -99/-99.9 identical pair
        ("v4.1", "llama2-70b-99"): 36,
        ("v4.1", "llama2-70b-99.9"): 38,
        ("v4.1", "mixtral-8x7b"): 15,
    }
    assert len({(r.round, r.submitter, r.system, r.benchmark, r.scenario) for r in rows}) == 110


def test_no_row_is_from_a_held_out_round(rows):
    assert LAST_ROUND == "v5.0"
    assert all(round_key(r.round) <= round_key("v5.0") for r in rows)
    assert {r.commit for r in rows if r.round == "v4.1"} == {V41}
    assert {r.commit for r in rows if r.round == "v4.0"} == {V40}


def test_the_development_and_held_out_rounds_split_the_table(rows):
    assert (DEVELOPMENT_ROUNDS, HELD_OUT_ROUNDS) == (("v4.1",), ("v4.0",))
    development = load_results(rounds=DEVELOPMENT_ROUNDS)
    held_out = load_results(rounds=HELD_OUT_ROUNDS)
    assert (len(development), len(held_out)) == (89, 21)
    assert sorted(development + held_out, key=rows.index) == rows
    assert load_results(rounds="v4.0") == held_out  # one round given bare
    assert load_results(rounds=()) == []


@pytest.mark.parametrize(
    ("rounds", "reason"),
    [(["v4.0", "4.1"], "a round is named vMAJOR.MINOR"), (["v5.1"], "rounds after v5.0")],
)
def test_a_bad_round_filter_is_one_line_naming_it(rounds, reason):
    with pytest.raises(ConfigError) as caught:
        load_results(rounds=rounds)
    assert str(caught.value).startswith(f"rounds={rounds[-1]!r}: ") and reason in str(caught.value)


def test_nvidia_h100_v40_row_is_its_loadgen_summary(rows):
    # closed/NVIDIA/results/DGX-H100_H100-SXM-80GBx8_TRT/llama2-70b-99.9/Server/performance/
    # run_1/mlperf_log_summary.txt @ v4.0's 3c4a1cf1, read by hand
    (row,) = [
        r
        for r in rows
        if (r.round, r.submitter, r.system) == ("v4.0", "NVIDIA", "DGX-H100_H100-SXM-80GBx8_TRT")
    ]
    assert row.benchmark == "llama2-70b-99.9" and row.commit == V40
    assert (row.completed_samples_per_s, row.completed_tokens_per_s) == (70.42, 20556.40)
    assert (row.scheduled_samples_per_s, row.target_qps) == (70.98, 71.2)
    assert (row.p99_ttft_ns, row.p99_tpot_ns) == (568_284_028, 156_076_924)
    assert (row.ttft_bound_ns, row.tpot_bound_ns) == (2_000_000_000, 200_000_000)
    assert row.framework == "TensorRT 9.3.0, CUDA 12.2" and row.accelerators_total == 8
    # no measurements JSON in the index's copy: the round's TensorRT code README decides
    assert (row.weight_data_types, row.precision) == ("", "fp8")
    assert row.precision_source == "closed/ASUSTeK/code/llama2-70b/tensorrt/README.md"


def test_every_v40_row_is_a_tensorrt_llama2_result_with_its_precision_stated_or_not(rows):
    v40 = [r for r in rows if r.round == "v4.0"]
    assert {(r.benchmark, r.scenario, r.weight_data_types) for r in v40} == {
        ("llama2-70b-99.9", "Server", "")
    }
    assert all(r.framework.startswith("TensorRT 9.3.0") for r in v40)
    sources = Counter(r.precision_source for r in v40 if r.precision == "fp8")
    assert sources == {
        "closed/ASUSTeK/code/llama2-70b/tensorrt/README.md": 16,
        "closed/Fujitsu/code/llama2-70b/tensorrt/README.md": 1,  # Fujitsu's own copy
    }
    # preview systems (NVIDIA's H200 and GH200) keep an unstated precision, as in v4.1
    unstated = {r.system for r in v40 if r.precision == "unstated"}
    assert unstated == {r.system for r in v40 if r.status == "preview"}
    assert len(unstated) == 4


def test_every_row_met_its_bounds_and_ran_near_its_target(rows):
    for row in rows:
        assert row.p99_ttft_ns <= row.ttft_bound_ns and row.p99_tpot_ns <= row.tpot_bound_ns
        # LoadGen schedules Poisson arrivals at target_qps: the realised rate is within 2 %
        assert row.scheduled_samples_per_s == pytest.approx(row.target_qps, rel=0.02)
        assert row.completed_samples_per_s <= row.scheduled_samples_per_s * 1.01


def test_preview_systems_built_from_private_code_have_no_precision(rows):
    unstated = {(r.submitter, r.system, r.benchmark) for r in rows if r.precision == "unstated"}
    assert unstated and all(r.status == "preview" for r in rows if r.precision == "unstated")
    assert ("NVIDIA", "B200-SXM-180GBx1_TRT", "llama2-70b-99") in unstated


def test_benchmarks_bounds_are_the_reference_mlperf_conf():
    specs = load_benchmarks()
    # loadgen/mlperf.conf @ mlcommons/inference v5.0.1 (llama3.1-8b: master)
    bounds = {name: (s.ttft_bound_ms, s.tpot_bound_ms) for name, s in specs.items()}
    assert bounds == {
        "llama2-70b-99": (2000, 200),
        "llama2-70b-99.9": (2000, 200),
        "llama2-70b-interactive-99": (450, 40),
        "llama2-70b-interactive-99.9": (450, 40),
        "mixtral-8x7b": (2000, 200),
        "llama3.1-405b": (6000, 175),
        "llama3.1-8b": (2000, 100),
    }
    assert specs["llama2-70b-99"].sample_count == 24576
    assert specs["llama2-70b-99"].output_tokens_mean == 294.45
    assert specs["mixtral-8x7b"].input_tokens_max is None  # not published: left empty


def test_every_result_was_checked_against_its_benchmarks_bounds(rows):
    specs = load_benchmarks()
    for row in rows:
        spec = specs[row.benchmark]
        assert row.ttft_bound_ns == spec.ttft_bound_ms * 1_000_000
        assert row.tpot_bound_ns == spec.tpot_bound_ms * 1_000_000


def _rewrite(tmp_path: Path, column: str, value: str, source: Path = RESULTS) -> Path:
    with source.open(newline="") as handle:
        table = list(csv.DictReader(handle))
    table[0][column] = value
    path = tmp_path / source.name
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(table[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(table)
    return path


@pytest.mark.parametrize(
    ("column", "value", "reason"),
    [
        ("round", "v5.1", "rounds after v5.0 are the held-out judging set"),
        ("round", "4.1", "a round is named vMAJOR.MINOR"),
        ("target_qps", "fast", "is not a number"),
        ("completed_tokens_per_s", "0", "must be finite and above 0"),
        ("completed_tokens_per_s", "inf", "must be finite and above 0"),
        ("p99_ttft_ns", "2.5e8", "is not a whole number"),
        ("p99_ttft_ns", "2000000001", "exceeds the TTFT bound"),
        ("accelerators_total", "9", "is not 2 per node x 1 nodes"),  # Azure, 2x H100 NVL
        ("benchmark", "gptj-99", "is not one of"),
        ("scenario", "Offline", "is not one of Server, Interactive"),
        ("precision", "fp12", "is not one of"),
        ("precision_source", "", "names a source exactly when a precision is stated"),
        ("result", "INVALID", "is not one of VALID"),
        ("commit", "abc", "is not a 40-digit git commit hash"),
        ("submitter", "", "is empty"),
    ],
)
def test_a_bad_cell_is_one_line_naming_file_line_and_column(tmp_path, column, value, reason):
    path = _rewrite(tmp_path, column, value)
    with pytest.raises(ConfigError) as caught:
        load_results(path)
    message = str(caught.value)
    assert message.startswith(f"mlperf_table={str(path)!r}: line 2, {column}={value!r}: ")
    assert reason in message and "\n" not in message


def test_a_table_with_other_columns_or_none_is_refused(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("round,submitter\nv4.1,NVIDIA\n")
    with pytest.raises(ConfigError, match=r"columns differ: missing \['system'"):
        load_results(path)
    with pytest.raises(ConfigError, match="file not found"):
        load_results(tmp_path / "absent.csv")


def test_the_benchmarks_table_is_checked_too(tmp_path):
    source = data_dir() / "mlperf" / "benchmarks.csv"
    with pytest.raises(ConfigError, match=r"line 2, tpot_bound_ms='-1': is below 1"):
        load_benchmarks(_rewrite(tmp_path, "tpot_bound_ms", "-1", source))
    with pytest.raises(ConfigError, match="appears twice"):
        load_benchmarks(_rewrite(tmp_path, "benchmark", "llama2-70b-99.9", source))


def test_the_columns_are_the_dataclasses_fields():
    assert COLUMNS[0] == "round" and COLUMNS[-2:] == ("source_path", "commit")
    assert "ttft_bound_ms" in BENCHMARK_COLUMNS
    with RESULTS.open() as handle:
        assert tuple(handle.readline().strip().split(",")) == COLUMNS


def test_every_v40_row_is_read_from_the_listed_copy(rows):
    # data/mlperf/v4.0_files.tsv lists the files of the v4.0 copy the rows were read from
    with (data_dir() / "mlperf" / "v4.0_files.tsv").open(newline="") as handle:
        listed = {row["path"]: row for row in csv.DictReader(handle, delimiter="\t")}
    for row in (r for r in rows if r.round == "v4.0"):
        assert row.source_path in listed
        assert f"closed/{row.submitter}/systems/{row.system}.json" in listed
        assert row.precision_source in listed or row.precision_source == ""
    summaries = [p for p in listed if p.endswith("mlperf_log_summary.txt")]
    assert len(summaries) == 22  # 21 rows and Intel's Gaudi 2 result (not a GPU)
