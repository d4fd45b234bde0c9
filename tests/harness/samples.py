"""The shipped harness samples (data/harness_samples/, named by the source in README.md)."""

from __future__ import annotations

from pathlib import Path

from sim.resources import data_dir

SAMPLES = data_dir() / "harness_samples"
VLLM_70B = SAMPLES / "surajssd_llm-k8s__vllm083_llama33-70b_8xA100-40G_tp8_sharegpt_qps04.json"
VLLM_8B = SAMPLES / "IOG-Foundation__vllm085_llama3-8b_1xH100-PCIe_sharegpt_qps4_summary_only.json"
SGLANG = SAMPLES / "datacrunch__sglang_llama33-70b_4xH200_tp4_online.jsonl"
GUIDELLM_JSON = SAMPLES / "guidellm__benchmarks_stripped.json"
GUIDELLM_YAML = SAMPLES / "guidellm__benchmarks_stripped.yaml"
AIPERF = SAMPLES / "aiperf_examples_run1__profile_export_aiperf.json"
AIPERF_REQUESTS = SAMPLES / "aiperf_examples_run1__profile_export.jsonl"


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
