"""A measured run as the benchmark that reproduces it (sim.harness.replay): each shipped sample's
load, lengths and engine; the workload node and the lengths file it writes (warm-ups first); the
one-line errors of a file that does not say enough."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.csv as pacsv
import pytest

from sim.calibration.bench_runs import prepare
from sim.errors import ConfigError
from sim.harness.formats import read_benchmark
from sim.harness.replay import EVEN_BURSTINESS, HarnessLoad, harness_load
from sim.harness.results import Definition, MeasuredRequests, MeasuredRun, Statistic
from sim.run import simulate
from sim.workload.source import build_workload
from tests.harness.samples import AIPERF, AIPERF_REQUESTS, GUIDELLM_JSON, SGLANG, VLLM_8B, VLLM_70B


def _file_lengths(path) -> tuple[list[int], list[int]]:
    """The completed requests' lengths, in the file's order, read from the JSON itself."""
    doc = json.loads(path.read_text())
    ok = [i for i, error in enumerate(doc["errors"]) if not error]
    return [doc["input_lens"][i] for i in ok], [doc["output_lens"][i] for i in ok]


def test_vllm_summary_only_file_replays_at_its_mean_lengths():
    (run,) = read_benchmark(VLLM_8B)
    load = harness_load(run)
    doc = json.loads(VLLM_8B.read_text())
    # 41,169 / 200 = 205.845 and 40,359 / 200 = 201.795: rounded to the nearest token
    assert (doc["total_input_tokens"], doc["total_output_tokens"]) == (41169, 40359)
    assert (load.prompt_tokens, load.output_tokens) == (206, 202)
    assert load.num_requests == 200
    assert load.request_rate == 4.0
    assert load.burstiness == 1.0
    assert load.max_concurrency is None
    assert load.num_warmups == 1  # vLLM's initial single-prompt test run
    assert load.per_request is None
    assert load.scheduler == "vllm"
    assert "mean lengths" in load.lengths


def test_vllm_detailed_file_replays_its_own_lengths_in_order():
    (run,) = read_benchmark(VLLM_70B)
    load = harness_load(run)
    ins, outs = _file_lengths(VLLM_70B)
    assert len(ins) == 200
    assert load.per_request == (tuple(ins), tuple(outs))
    assert load.per_request[0][:5] == (13, 25, 27, 10, 329)  # the file's first prompts
    assert load.num_requests == 200
    assert load.request_rate == 4.0 and load.max_concurrency is None
    assert (load.prompt_tokens, load.output_tokens) == (None, None)
    assert load.num_warmups == 1 and load.scheduler == "vllm"
    assert load.lengths == "the file's per-request lengths, in order"


def test_sglang_runs_replay_the_random_dataset_or_the_mean_lengths():
    runs = read_benchmark(SGLANG)
    assert len(runs) == 7
    loads = [harness_load(run) for run in runs]
    assert [load.request_rate for load in loads] == [1.0, 2.0, 4.0, 8.0, 16.0, 4.0, 8.0]
    assert [load.num_requests for load in loads] == [300, 600, 1200, 2400, 3200, 1200, 2400]
    uniform = {"dist": "uniform", "low": 1, "high": 1024}  # range ratio 0: [max(1, 0), 1024]
    for load in loads[:5]:
        assert load.prompt_tokens == uniform and load.output_tokens == uniform
        assert load.lengths == "SGLang's random dataset (uniform, range ratio 0)"
    # the ShareGPT lines keep only totals: every request at the mean, rounded
    for run, load in zip(runs[5:], loads[5:], strict=True):
        assert run.settings["dataset_name"] == "sharegpt"
        assert load.prompt_tokens == round(run.mean_input_tokens)
        assert load.output_tokens == round(run.mean_output_tokens)
    assert (loads[5].prompt_tokens, loads[5].output_tokens) == (224, 189)
    assert (loads[6].prompt_tokens, loads[6].output_tokens) == (225, 192)
    for load in loads:
        assert load.scheduler == "sglang"
        assert load.num_warmups == 1
        assert load.max_concurrency is None and load.per_request is None


def test_sglang_range_ratio_sets_the_low_end():
    (run,) = read_benchmark(SGLANG)[:1]
    settings = {**run.settings, "random_range_ratio": 0.5, "random_input_len": 1001}
    load = harness_load(MeasuredRun(**{**run.__dict__, "settings": settings}))
    # SGLang draws from [max(1, int(len x ratio)), len]
    assert load.prompt_tokens == {"dist": "uniform", "low": 500, "high": 1001}
    assert load.output_tokens == {"dist": "uniform", "low": 512, "high": 1024}
    assert load.lengths == "SGLang's random dataset (uniform, range ratio 0.5)"


def test_guidellm_synchronous_is_one_at_a_time_at_the_data_spec_lengths():
    (run,) = read_benchmark(GUIDELLM_JSON)
    load = harness_load(run)
    assert load.max_concurrency == 1
    assert load.request_rate is None
    assert (load.prompt_tokens, load.output_tokens) == (256, 128)
    assert load.lengths == "the data spec 'prompt_tokens=256,output_tokens=128'"
    # a 30 s window (max_duration, no max_number): the client sends until it closes, from
    # twice the requests the report counts (46 completed + 1 incomplete) plus the cap
    assert load.window_s == 30.0
    assert load.num_requests == 2 * (46 + 1) + 1
    assert load.num_warmups == 0
    assert load.scheduler is None  # GuideLLM does not record the server
    assert load.burstiness == 1.0


def test_aiperf_keeps_its_concurrency_and_per_request_lengths():
    (run,) = read_benchmark(AIPERF)
    load = harness_load(run)
    records = [json.loads(line) for line in AIPERF_REQUESTS.read_text().splitlines() if line]
    done = [r["metrics"] for r in records if r.get("error") is None]  # null: no error
    ins = tuple(m["input_sequence_length"]["value"] for m in done)
    outs = tuple(m["output_sequence_length"]["value"] for m in done)
    assert len(ins) == 89
    assert load.per_request == (ins, outs)
    assert load.num_requests == 89
    assert load.max_concurrency == 100
    assert load.request_rate is None
    assert load.num_warmups == 0
    assert load.scheduler is None


def test_workload_writes_the_lengths_with_the_warmups_first_and_replays_them(tmp_path):
    (run,) = read_benchmark(VLLM_70B)
    load = harness_load(run)
    ins, outs = _file_lengths(VLLM_70B)
    node = load.workload(tmp_path, "replay")
    path = tmp_path / "replay.csv"
    assert node["prompt_tokens"] == {
        "dist": "empirical",
        "path": str(path),
        "in_order": True,
        "column": "prompt_tokens",
    }
    assert node["output_tokens"] == {**node["prompt_tokens"], "column": "output_tokens"}
    assert node["kind"] == "bench" and node["num_warmups"] == 1 and node["num_requests"] == 200
    assert node["request_rate"] == 4.0 and node["max_concurrency"] is None
    table = pacsv.read_csv(path)
    assert table.column("prompt_tokens").to_pylist() == ins[:1] + ins
    assert table.column("output_tokens").to_pylist() == outs[:1] + outs
    # the client sends the warm-up (the file's first prompt) then the file's prompts in order
    workload = build_workload(node, seed=3)
    assert workload.warmup_requests == 1 and workload.num_requests == 201
    assert workload.prompt_tokens.tolist() == ins[:1] + ins
    assert workload.output_tokens.tolist() == outs[:1] + outs
    assert workload.prompt_tokens[1:].tolist() == ins
    # whatever the seed: in order means no draw
    assert build_workload(node, seed=11).prompt_tokens.tolist() == workload.prompt_tokens.tolist()
    # vLLM 0.8.3's client (the file is dated before mid-2025): the first measured request at
    # once, then the gaps as drawn, not rescaled to end at num_requests / rate
    assert node["normalise_sends"] is False
    assert workload.arrival_time_s[0] == workload.arrival_time_s[1] == 0.0
    assert workload.arrival_time_s[-1] != pytest.approx(200 / 4.0)


def test_workload_with_several_warmups_repeats_the_first_rows(tmp_path):
    load = HarnessLoad(
        num_requests=4,
        request_rate=2.0,
        burstiness=1.0,
        normalise_sends=True,
        max_concurrency=None,
        num_warmups=2,
        lengths="test",
        prompt_tokens=None,
        output_tokens=None,
        per_request=((5, 6, 7, 8), (1, 2, 3, 4)),
    )
    workload = build_workload(load.workload(tmp_path), seed=0)
    assert (tmp_path / "lengths.csv").is_file()  # the default name
    assert workload.prompt_tokens.tolist() == [5, 6, 5, 6, 7, 8]
    assert workload.output_tokens.tolist() == [1, 2, 1, 2, 3, 4]
    assert workload.warmup_requests == 2


def test_workload_without_per_request_lengths_writes_no_file(tmp_path):
    (run,) = read_benchmark(SGLANG)[:1]
    node = harness_load(run).workload(tmp_path)
    assert list(tmp_path.iterdir()) == []
    assert node["prompt_tokens"] == {"dist": "uniform", "low": 1, "high": 1024}
    workload = build_workload(node, seed=0)
    assert workload.num_requests == 301 and workload.warmup_requests == 1
    assert 1 <= workload.prompt_tokens.min() and workload.prompt_tokens.max() <= 1024
    assert np.all(np.diff(workload.arrival_time_s) >= 0)


def _run(**kwargs) -> MeasuredRun:
    base = dict(
        source="bench.json",
        tool="guidellm",
        label="benchmarks[0]",
        latency={"ttft": Statistic("ttft", Definition.TTFT, mean_s=0.02)},
        request_rate_per_s=5.0,
        completed=10,
        mean_input_tokens=100.0,
        mean_output_tokens=20.0,
    )
    return MeasuredRun(**{**base, **kwargs})


def test_a_run_with_neither_rate_nor_concurrency_is_refused_naming_the_file():
    with pytest.raises(ConfigError) as err:
        harness_load(_run(request_rate_per_s=None, max_concurrency=None))
    assert err.value.field == "bench_file" and err.value.value == "bench.json"
    assert "benchmarks[0]: records neither a request rate nor a concurrency" in str(err.value)
    # a concurrency alone is enough: every request due at once under the cap
    load = harness_load(_run(request_rate_per_s=None, max_concurrency=8))
    assert (load.request_rate, load.max_concurrency) == (None, 8)


def test_a_run_with_no_lengths_is_refused_naming_the_file():
    with pytest.raises(ConfigError) as err:
        harness_load(_run(mean_input_tokens=None))
    assert err.value.field == "bench_file" and err.value.value == "bench.json"
    assert "records neither per-request lengths nor token totals" in str(err.value)
    with pytest.raises(ConfigError, match="neither per-request lengths"):
        harness_load(_run(mean_output_tokens=None, requests=MeasuredRequests((), ())))


def test_a_run_that_completed_nothing_is_refused():
    with pytest.raises(ConfigError, match="^bench_file='bench.json': benchmarks\\[0\\]: completed"):
        harness_load(_run(completed=0))


def test_infinite_rate_sends_everything_at_once():
    load = harness_load(_run(request_rate_per_s=float("inf")))
    assert load.request_rate is None and load.max_concurrency is None


def test_guidellm_constant_rate_is_evenly_spaced():
    load = harness_load(_run(settings={"strategy": "constant"}))
    assert load.burstiness == EVEN_BURSTINESS
    assert harness_load(_run(settings={"strategy": "poisson"})).burstiness == 1.0
    # a recorded burstiness is kept; lengths at the means, rounded and at least 1
    load = harness_load(_run(settings={"burstiness": 0.5}, mean_output_tokens=0.3))
    assert load.burstiness == 0.5 and (load.prompt_tokens, load.output_tokens) == (100, 1)


def test_a_duration_bounded_run_counts_only_what_completed_in_its_window(tmp_path):
    (run,) = prepare(
        [(str(GUIDELLM_JSON), ["model=llama31_8b", "hardware=h100_sxm"])], [], tmp_path, 0
    )
    assert run.cfg["sim"]["horizon_s"] == 30.0
    result = simulate(run.cfg)
    status = np.asarray(result.requests.column("status").to_pylist())
    completion = np.asarray(result.requests.column("completion_time_s").to_pylist(), dtype=float)
    done = status == "completed"
    # one at a time for 30 s: many complete, all inside the window, and the client never ran
    # out of requests before the window closed (one was still in flight at its end)
    assert done.sum() > 10 and (completion[done] <= 30.0).all()
    assert (status == "unfinished").sum() == 1
