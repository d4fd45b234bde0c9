"""The builder of the shipped MLPerf table (benchmarks/mlperf_table.py), on a tiny results
repository made here: which results it keeps, the precision rules, and the held-out rounds."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from sim.harness.mlperf import load_results
from tests.support import REPO_ROOT


def _builder():
    spec = importlib.util.spec_from_file_location(
        "mlperf_table", REPO_ROOT / "benchmarks" / "mlperf_table.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up while being defined
    spec.loader.exec_module(module)
    return module


def _summary(valid: bool, qps: str, ttft_ns: int) -> str:
    # the lines of a LoadGen mlperf_log_summary.txt the builder reads, in LoadGen's spelling
    return "\n".join(
        [
            "Scenario : Server",
            "Completed samples per second    : 9.90",
            "Completed tokens per second: 2900.50",
            f"Result is : {'VALID' if valid else 'INVALID'}",
            f"Scheduled samples per second : {qps}",
            "Completed tokens per second                 : 2900.50",
            f"99.00 percentile first token latency (ns)   : {ttft_ns}",
            "99.00 percentile time to output token (ns)   : 150000000",
            f"target_qps : {qps}",
            "ttft_latency (ns): 2000000000",
            "tpot_latency (ns): 200000000",
        ]
    )


def _system(accelerator: str, status: str = "available", framework: str = "TensorRT 10.2") -> str:
    return json.dumps(
        {
            "accelerator_model_name": accelerator,
            "accelerators_per_node": 8,
            "number_of_nodes": 1,
            "framework": framework,
            "status": status,
            "system_name": f"box ({accelerator})",
        }
    )


FP16_QUANTIZED = json.dumps(
    {"weight_data_types": "fp16", "weight_transformations": "quantization, affine fusion"}
)


@pytest.fixture
def results_repo(tmp_path: Path) -> Path:
    """A results repository: four llama2-70b Server results and one GPT-J result."""
    work = tmp_path / "work"
    files = {
        # kept: fp8 from the code README's quantization command
        "closed/Acme/systems/H100x8.json": _system("NVIDIA H100-SXM-80GB"),
        "closed/Acme/results/H100x8/llama2-70b-99/Server/performance/run_1/"
        "mlperf_log_summary.txt": _summary(True, "10", 400_000_000),
        "closed/Acme/measurements/H100x8/llama2-70b-99/Server/H100x8_Server.json": FP16_QUANTIZED,
        "closed/Acme/code/llama2-70b/tensorrt/README.md": "python quantize.py --qformat fp8 ...",
        # kept, precision unstated: a preview system (private code)
        "closed/Acme/systems/B200x8.json": _system("NVIDIA B200-SXM-180GB", status="preview"),
        "closed/Acme/results/B200x8/llama2-70b-99/Server/performance/run_1/"
        "mlperf_log_summary.txt": _summary(True, "10", 300_000_000),
        "closed/Acme/measurements/B200x8/llama2-70b-99/Server/B200x8_Server.json": FP16_QUANTIZED,
        # left out: INVALID
        "closed/Acme/results/H100x8/llama2-70b-99.9/Server/performance/run_1/"
        "mlperf_log_summary.txt": _summary(False, "10", 400_000_000),
        # left out: not a GPU
        "closed/Other/systems/gaudi.json": _system("Intel Gaudi 2", framework="vLLM fork"),
        "closed/Other/results/gaudi/llama2-70b-99/Server/performance/run_1/"
        "mlperf_log_summary.txt": _summary(True, "10", 400_000_000),
        # left out: GPT-J has no TTFT/TPOT bounds
        "closed/Acme/results/H100x8/gptj-99/Server/performance/run_1/"
        "mlperf_log_summary.txt": _summary(True, "10", 400_000_000),
    }
    for name, text in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
    git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "results"], check=True)
    return work / ".git"


def test_the_builder_keeps_valid_gpu_llm_server_results_with_their_precision(
    results_repo, tmp_path, capsys
):
    out = tmp_path / "table.csv"
    assert _builder().main([f"v4.1={results_repo}", "--out", str(out)]) == 0
    rows = {row.system: row for row in load_results(out)}
    assert set(rows) == {"H100x8", "B200x8"}
    h100 = rows["H100x8"]
    assert (h100.precision, h100.precision_source) == (
        "fp8",
        "closed/Acme/code/llama2-70b/tensorrt/README.md",
    )
    assert (h100.target_qps, h100.p99_ttft_ns, h100.completed_tokens_per_s) == (10, 4e8, 2900.5)
    assert h100.accelerators_total == 8 and h100.framework == "TensorRT 10.2"
    assert (rows["B200x8"].precision, rows["B200x8"].precision_source) == ("unstated", "")
    commit = subprocess.run(
        ["git", f"--git-dir={results_repo}", "rev-parse", "HEAD"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert {row.commit for row in rows.values()} == {commit}
    printed = capsys.readouterr().out
    assert "'not VALID': 1" in printed and "'not a GPU: Intel Gaudi 2': 1" in printed
    # --check: the written table is what the repository gives
    assert _builder().main([f"v4.1={results_repo}", "--out", str(out), "--check"]) == 0


def test_the_builder_refuses_held_out_rounds_and_bad_arguments(results_repo, tmp_path, capsys):
    builder = _builder()
    for argv, said in [
        ([f"v5.1={results_repo}"], "rounds after v5.0 are held out"),
        ([f"4.1={results_repo}"], "a round is named vMAJOR.MINOR"),
        ([f"v4.1={tmp_path}"], "is not a git directory"),
    ]:
        with pytest.raises(SystemExit) as caught:
            builder.main([*argv, "--out", str(tmp_path / "t.csv")])
        assert caught.value.code == 2 and said in capsys.readouterr().err


# the Server summary of v4.0's closed/NVIDIA/results/DGX-H100_H100-SXM-80GBx8_TRT/
# llama2-70b-99.9 (3c4a1cf1), shortened: its header, the lines the builder reads and the
# p99.9 / query-latency lines next to them that it must not take, in LoadGen's spacing
V40_SUMMARY = """\
================================================
MLPerf Results Summary
================================================
SUT name : llama2-70b-Server-SUT-LoadGen
Scenario : Server
Mode     : PerformanceOnly
Completed samples per second    : 70.42
Result is : VALID
  Performance constraints satisfied : Yes
  Min duration satisfied : Yes
  Min queries satisfied : Yes
  Early stopping satisfied: Yes
TTFT Early Stopping Result:
 * Run successful.
TPOT Early Stopping Result:
 * Run successful.

================================================
Additional Stats
================================================
Scheduled samples per second : 70.98
99.00 percentile latency (ns)   : 132165328953

Completed tokens per second                 : 20556.40
99.00 percentile first token latency (ns)   : 568284028
99.90 percentile first token latency (ns)   : 656435931

99.00 percentile time to output token (ns)   : 156076924
99.90 percentile time to output token (ns)   : 167124497

================================================
Test Parameters Used
================================================
samples_per_query : 1
target_qps : 71.2
ttft_latency (ns): 2000000000
tpot_latency (ns): 200000000
min_duration (ms): 2400000
"""


def test_a_v40_summary_reads_with_the_v41_field_names():
    assert _builder().parse_summary(V40_SUMMARY) == {
        "result": "VALID",
        "completed_samples_per_s": "70.42",
        "completed_tokens_per_s": "20556.40",
        "scheduled_samples_per_s": "70.98",
        # the p99 lines, not the query latency's or the p99.9 ones next to them
        "p99_ttft_ns": "568284028",
        "p99_tpot_ns": "156076924",
        "target_qps": "71.2",
        "ttft_bound_ns": "2000000000",
        "tpot_bound_ns": "200000000",
    }


COMMIT = "3c4a1cf196b70175cfe7c59e067cd1d923aa4f3f"


def test_a_plain_directory_at_a_stated_commit_gives_the_git_trees_rows(
    results_repo, tmp_path, capsys
):
    builder = _builder()
    work = results_repo.parent  # the same files, checked out
    from_git, from_dir = tmp_path / "git.csv", tmp_path / "dir.csv"
    assert builder.main([f"v4.1={results_repo}", "--out", str(from_git)]) == 0
    assert builder.main([f"v4.1={work}@{COMMIT}", "--out", str(from_dir)]) == 0
    git_rows, dir_rows = load_results(from_git), load_results(from_dir)
    assert {row.commit for row in dir_rows} == {COMMIT}
    assert [dataclasses.replace(row, commit=COMMIT) for row in git_rows] == dir_rows
    assert {row.source_path for row in dir_rows} == {
        "closed/Acme/results/H100x8/llama2-70b-99/Server/performance/run_1/mlperf_log_summary.txt",
        "closed/Acme/results/B200x8/llama2-70b-99/Server/performance/run_1/mlperf_log_summary.txt",
    }
    assert f"v4.1 @ {COMMIT}: 2 rows" in capsys.readouterr().out


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _result(submitter: str, system: str) -> str:
    return (
        f"closed/{submitter}/results/{system}/llama2-70b-99.9/Server/performance/run_1/"
        "mlperf_log_summary.txt"
    )


def test_without_a_measurements_json_a_tensorrt_system_takes_the_rounds_code_readme(tmp_path):
    # a copy that keeps one of each set of identical files: no measurements JSON at all, and
    # the code README under one submitter only (Zeta's own differs, so it is kept too)
    tree = _tree(
        tmp_path / "tree",
        {
            "closed/Acme/code/llama2-70b/tensorrt/README.md": "quantize.py --qformat=fp8 ...",
            "closed/Zeta/code/llama2-70b/tensorrt/README.md": "quantize.py --qformat=int4 ...",
            **{
                f"closed/{s}/systems/{s}x8.json": _system("NVIDIA H100-SXM-80GB")
                for s in ("Beta", "Zeta")
            },
            "closed/Gamma/systems/Gammax8.json": _system("NVIDIA H100-SXM-80GB", status="preview"),
            "closed/Delta/systems/Deltax8.json": _system("NVIDIA H100-SXM-80GB", framework="vLLM"),
            **{_result(s, f"{s}x8"): V40_SUMMARY for s in ("Beta", "Gamma", "Delta", "Zeta")},
        },
    )
    out = tmp_path / "t.csv"
    assert _builder().main([f"v4.0={tree}@{COMMIT}", "--out", str(out)]) == 0
    stated = {r.submitter: (r.precision, r.precision_source) for r in load_results(out)}
    assert stated == {
        "Beta": ("fp8", "closed/Acme/code/llama2-70b/tensorrt/README.md"),  # the copy it holds
        "Zeta": ("int4", "closed/Zeta/code/llama2-70b/tensorrt/README.md"),  # its own first
        "Gamma": ("unstated", ""),  # preview: private code
        "Delta": ("unstated", ""),  # not TensorRT: the README is not its code
    }
    assert {r.weight_data_types for r in load_results(out)} == {""}


def test_a_round_is_rebuilt_and_checked_alone_keeping_the_others(results_repo, tmp_path, capsys):
    builder = _builder()
    out = tmp_path / "t.csv"
    assert builder.main([f"v4.1={results_repo}", "--out", str(out)]) == 0
    tree = _tree(
        tmp_path / "v40",
        {
            "closed/Beta/systems/Betax8.json": _system("NVIDIA H100-SXM-80GB"),
            _result("Beta", "Betax8"): V40_SUMMARY,
        },
    )
    assert builder.main([f"v4.0={tree}@{COMMIT}", "--out", str(out)]) == 0
    assert "wrote 1 rows" in capsys.readouterr().out
    assert Counter(row.round for row in load_results(out)) == {"v4.1": 2, "v4.0": 1}
    # --check with one round compares that round's rows only
    assert builder.main([f"v4.0={tree}@{COMMIT}", "--out", str(out), "--check"]) == 0
    assert "the shipped table's v4.0 rows match" in capsys.readouterr().out
    (tree / _result("Beta", "Betax8")).write_text(V40_SUMMARY.replace("70.42", "70.43"))
    assert builder.main([f"v4.0={tree}@{COMMIT}", "--out", str(out), "--check"]) == 1
    assert "v4.0 rows differ from the rebuilt ones" in capsys.readouterr().out


def test_a_directory_needs_a_whole_commit_hash(results_repo, tmp_path, capsys):
    builder = _builder()
    for argv, said in [
        ([f"v4.0={tmp_path}@3c4a1cf"], "the commit after @ is not a 40-digit git commit hash"),
        ([f"v4.0={tmp_path / 'absent'}@{COMMIT}"], "is not a directory"),
        ([f"v4.0={tmp_path}@{COMMIT}", f"v4.0={results_repo}"], "a round is given twice"),
    ]:
        with pytest.raises(SystemExit) as caught:
            builder.main([*argv, "--out", str(tmp_path / "t.csv")])
        assert caught.value.code == 2 and said in capsys.readouterr().err


def test_a_bad_table_at_out_is_refused_before_anything_is_written(results_repo, tmp_path, capsys):
    out = tmp_path / "t.csv"
    out.write_text("round,submitter\nv4.0,Acme\n")
    with pytest.raises(SystemExit) as caught:
        _builder().main([f"v4.1={results_repo}", "--out", str(out)])
    assert caught.value.code == 2 and "columns differ" in capsys.readouterr().err
    assert out.read_text() == "round,submitter\nv4.0,Acme\n"
