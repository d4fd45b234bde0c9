"""The MLPerf fidelity benchmark (benchmarks/fidelity_mlperf.py): each row's simulated setup as
the submitter's code states it, the output lengths' calibration to the reference mean, the rows
it refuses, and one small capacity search end to end."""

from __future__ import annotations

import csv
import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from sim.harness.mlperf import load_benchmarks, load_results
from sim.harness.mlperf_configs import map_result
from sim.plan.rate_search import FOUND
from tests.support import REPO_ROOT


def _benchmark():
    spec = importlib.util.spec_from_file_location(
        "fidelity_mlperf", REPO_ROOT / "benchmarks" / "fidelity_mlperf.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while defined
    spec.loader.exec_module(module)
    return module


fm = _benchmark()


def _row(submitter: str, system: str, benchmark: str):
    (row,) = [
        r
        for r in load_results()
        if (r.submitter, r.system, r.benchmark) == (submitter, system, benchmark)
    ]
    return row


def _setup(row, requests: int = 3000, whole_fleet: bool = False):
    return fm.setup(
        row, map_result(row), load_benchmarks()[row.benchmark], requests, whole_fleet=whole_fleet
    )


def _values(setup) -> dict[str, str]:
    return dict(o.split("=", 1) for o in setup.overrides)


def test_nvidia_h100_llama2_runs_as_its_config_says():
    # closed/NVIDIA/configs/llama2-70b/Server: H100_SXM_80GB_TP2x4, gpu_batch_size 1024,
    # max_num_tokens 4096 (the benchmark's base config), the harness's max_util policy
    setup = _setup(_row("NVIDIA", "DGX-H100_H100-SXM-80GBx8_TRT", "llama2-70b-99"))
    values = _values(setup)
    assert (setup.tp, setup.replicas, setup.simulated) == (2, 4, 1)
    assert values["fleet.tp"] == "2"
    assert values["scheduler"] == "trtllm"
    assert values["scheduler.capacity_policy"] == "max_utilization"
    assert values["scheduler.max_num_seqs"] == "1024"
    assert values["scheduler.max_num_batched_tokens"] == "4096"
    assert values["precision.weights"] == "fp8" and values["precision.kv"] == "fp8"
    assert values["workload"] == "poisson"


def test_amd_mi300x_runs_vllm_v0_at_tp1_on_each_gpu():
    # vLLM 0.4.3's v0 engine without chunked prefill: all-prefill or all-decode steps
    setup = _setup(_row("AMD", "8xMI300X_2xEPYC-9374F", "llama2-70b-99"))
    values = _values(setup)
    assert (setup.tp, setup.replicas) == (1, 8)
    assert values["scheduler"] == "prefill_first"
    assert values["scheduler.max_num_seqs"] == "768"
    assert values["scheduler.max_num_batched_tokens"] == "65536"
    assert values["memory.gpu_memory_utilization"] == "0.99"


def test_h200_mixtral_and_cts_systems_take_their_own_classes():
    mixtral = _values(_setup(_row("NVIDIA", "H200-SXM-141GBx8_TRT", "mixtral-8x7b")))
    assert (mixtral["scheduler.max_num_seqs"], mixtral["scheduler.max_num_batched_tokens"]) == (
        "1200",
        "8192",
    )
    one = _values(_setup(_row("NVIDIA", "H200-SXM-141GB-CTSx1_TRT", "llama2-70b-99")))
    eight = _values(_setup(_row("NVIDIA", "H200-SXM-141GB-CTSx8_TRT", "llama2-70b-99")))
    assert (one["scheduler.max_num_seqs"], eight["scheduler.max_num_seqs"]) == ("850", "1024")


def test_whole_fleet_simulates_every_replica_at_the_fleets_rate():
    row = _row("NVIDIA", "DGX-H100_H100-SXM-80GBx8_TRT", "llama2-70b-99")
    one, whole = _setup(row, 100), _setup(row, 100, whole_fleet=True)
    assert whole.simulated == whole.replicas == 4
    assert float(_values(whole)["workload.qps"]) == 4 * float(_values(one)["workload.qps"])
    assert _values(whole)["workload.num_requests"] == "400"


def test_output_lengths_keep_the_reference_mean():
    spec = load_benchmarks()["llama2-70b-99"]
    median = fm.output_median(spec.output_tokens_mean, fm.OUTPUT_SIGMA, spec.output_tokens_max)
    draws = np.random.default_rng(0).lognormal(math.log(median), fm.OUTPUT_SIGMA, 400_000)
    clipped = np.clip(draws, None, spec.output_tokens_max)
    assert clipped.mean() == pytest.approx(spec.output_tokens_mean, rel=0.01)


def test_rows_without_configs_are_listed_with_their_reasons():
    args = fm.argparse.Namespace(
        round="v4.1",
        benchmark=None,
        hardware="GH200",
        rows=None,
        requests=100,
        whole_fleet=False,
    )
    rows, refused = fm.select(args)
    assert rows == []
    assert refused and all("GH200" in why for _, why in refused)


def test_one_capacity_search_end_to_end(tmp_path: Path):
    # an H200 replica of Llama 2 70B (TP 1) with few requests: the search brackets and
    # bisects, and the row's prediction is the replica's capacity times its 8 replicas
    row = _row("NVIDIA", "H200-SXM-141GBx8_TRT", "llama2-70b-99")
    setup = _setup(row, requests=150)
    key = (setup.overrides, fm.slo_key(row))
    capacities = fm.search_all({key: setup}, tmp_path, 1, lambda line: None)
    capacity = capacities[key]
    assert capacity["outcome"] == FOUND
    assert capacity["misses_at_rate_x"] / capacity["rate_x"] <= 1 + 0.02 + 1e-6
    result = fm.Row(row, map_result(row), setup)
    fm.predict([result], capacities)
    assert result.predicted == pytest.approx(capacity["requests_per_s"] * 8)
    assert result.error == pytest.approx(
        (result.predicted - row.completed_samples_per_s) / row.completed_samples_per_s
    )
    # --csv: the row by its id, marked developed on (v4.1), its ratio predicted / measured
    fm.write_csv([result], tmp_path / "rows.csv")
    with (tmp_path / "rows.csv").open(newline="") as f:
        (written,) = list(csv.DictReader(f))
    assert list(written) == list(fm.CSV_COLUMNS)
    assert written["row_id"] == "v4.1/NVIDIA/H200-SXM-141GBx8_TRT/llama2-70b-99"
    assert written["held_out"] == "False"
    predicted = float(written["predicted_samples_per_s"])
    assert predicted == pytest.approx(result.predicted, rel=1e-3)
    assert float(written["ratio"]) == pytest.approx(
        predicted / row.completed_samples_per_s, abs=5e-5
    )


def test_prompts_are_the_datasets_own():
    # the shipped prompt lengths: Llama 2 70B's 24,576 OpenOrca prompts sum to 5,463,976 tokens
    # (48 to 1,021), as a second record of the same MLCommons file says (data/mlperf/README.md)
    import pyarrow.parquet as pq

    from sim.resources import data_dir

    llama = pq.read_table(data_dir() / "mlperf" / "lengths_llama2_70b.parquet")
    prompts = llama.column("prompt_tokens").to_numpy()
    assert (len(prompts), int(prompts.sum()), prompts.min(), prompts.max()) == (
        24576,
        5463976,
        48,
        1021,
    )
    mixtral = pq.read_table(data_dir() / "mlperf" / "lengths_mixtral_8x7b.parquet")
    assert mixtral.num_rows == 15000
    values = _values(_setup(_row("NVIDIA", "DGX-H100_H100-SXM-80GBx8_TRT", "mixtral-8x7b")))
    assert "lengths_mixtral_8x7b.parquet" in values["workload.prompt_tokens"]
    assert "column: output_tokens" in values["workload.output_tokens"]
