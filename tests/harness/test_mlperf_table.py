"""The builder of the shipped MLPerf table (benchmarks/mlperf_table.py), on a tiny results
repository made here: which results it keeps, the precision rules, and the held-out rounds."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
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
