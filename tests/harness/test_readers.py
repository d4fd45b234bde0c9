"""Each reader on each shipped sample: the exact figures the files hold, in seconds, with each
tool's definitions; and the definitions themselves checked against the files' own per-request
values."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from sim.errors import ConfigError
from sim.harness.formats import read_benchmark
from sim.harness.results import Definition
from sim.harness.simulated import SimulatedRequests, mean, per_request, percentile
from tests.harness.samples import (
    AIPERF,
    AIPERF_REQUESTS,
    GUIDELLM_JSON,
    GUIDELLM_YAML,
    SGLANG,
    VLLM_8B,
    VLLM_70B,
    write,
)


def _requests(arrival, first, last, out) -> SimulatedRequests:
    """Per-request times as a run folder would hold them (the definitions' inputs)."""
    return SimulatedRequests(
        arrival_s=np.asarray(arrival, float),
        first_token_s=np.asarray(first, float),
        completion_s=np.asarray(last, float),
        output_tokens=np.asarray(out, np.int64),
        duration_s=1.0,
        summary={},
    )


def test_vllm_083_with_per_request_arrays():
    (run,) = read_benchmark(VLLM_70B)
    assert run.tool == "vllm bench serve"
    assert run.model == "meta-llama/Llama-3.3-70B-Instruct"
    assert (run.num_prompts, run.completed, run.failed) == (200, 200, 0)
    assert run.request_rate_per_s == 4.0 and run.max_concurrency is None
    assert run.duration_s == 62.98832992400003
    assert run.request_throughput_per_s == 3.1751913448302957
    assert run.output_throughput_tokens_per_s == 673.9184869835061
    tpot = run.latency["tpot"]
    assert tpot.definition is Definition.GAP_AFTER_FIRST
    assert tpot.mean_s == pytest.approx(27.083319078977674e-3, rel=1e-15)
    assert tpot.percentiles_s == pytest.approx(
        {50.0: 27.348463269617604e-3, 99.0: 27.912823145449423e-3}
    )
    assert tpot.std_s == pytest.approx(0.8072187973568774e-3)
    assert run.latency["ttft"].mean_s == pytest.approx(50.32546663501307e-3)
    assert run.latency["itl"].definition is Definition.POOLED_GAPS
    assert "e2e" not in run.latency  # asked for with --percentile-metrics only
    assert "request_goodput_per_s" not in run.settings  # null in the file: no --goodput SLO
    reqs = run.requests
    assert reqs is not None and len(reqs.input_tokens) == 200
    assert reqs.input_tokens[:3] == (13, 25, 27) and reqs.output_tokens[:3] == (120, 770, 81)
    assert sum(reqs.input_tokens) == 42659 and sum(reqs.output_tokens) == 42449
    assert reqs.ttft_s is not None and reqs.e2e_s is not None
    assert reqs.ttft_s[0] == 0.03028566500006491
    # vLLM's TPOT rebuilt from the arrays (e2e = ttft + sum(itls)) is the file's mean TPOT
    values, _ = per_request(
        _requests(np.zeros(200), reqs.ttft_s, reqs.e2e_s, reqs.output_tokens),
        Definition.GAP_AFTER_FIRST,
    )
    assert values.mean() == pytest.approx(tpot.mean_s, rel=1e-6)
    assert np.median(np.asarray(reqs.ttft_s)) == pytest.approx(run.latency["ttft"].median_s)


def test_vllm_085_summary_only():
    (run,) = read_benchmark(VLLM_8B)
    assert run.requests is None
    assert run.completed == 200 and run.num_prompts == 200
    assert run.mean_input_tokens == 41169 / 200 and run.mean_output_tokens == 40359 / 200
    ttft = run.latency["ttft"]
    assert sorted(ttft.percentiles_s) == [50.0, 90.0, 95.0, 99.0, 100.0]
    assert ttft.percentiles_s[100.0] == pytest.approx(28.803752968087792e-3)
    # the key really ends in a colon in vLLM 0.8.x
    assert run.settings["request_goodput_per_s"] == 3.8319253567612837
    assert run.settings["gpu_name"] == "NVIDIA-H100-PCIe"


def test_sglang_jsonl_has_one_run_per_line():
    runs = read_benchmark(SGLANG)
    assert [r.request_rate_per_s for r in runs] == [1.0, 2.0, 4.0, 8.0, 16.0, 4.0, 8.0]
    assert [r.settings["dataset_name"] for r in runs] == ["random"] * 5 + ["sharegpt"] * 2
    first = runs[0]
    assert first.tool == "sglang bench_serving" and first.completed == 300
    assert first.latency["ttft"].median_s == pytest.approx(85.74514742940664e-3)
    assert first.latency["ttft"].mean_s is None  # this version keeps the median only
    assert first.latency["itl"].definition is Definition.POOLED_GAPS
    assert first.latency["itl"].median_s == pytest.approx(13.638956006616354e-3)
    assert first.latency["e2e"].mean_s == pytest.approx(7840.616212638561e-3)
    assert "tpot" not in first.latency
    # no request throughput in the file: completed / duration
    assert first.request_throughput_per_s == 300 / 298.3675805060193
    assert first.mean_input_tokens == 152612 / 300


def test_sglang_offline_run_writes_infinity(tmp_path):
    line = json.loads(SGLANG.read_text().splitlines()[0])
    text = json.dumps(line).replace('"request_rate": 1.0', '"request_rate": Infinity')
    (run,) = read_benchmark(write(tmp_path / "offline.jsonl", text + "\n"))
    assert math.isinf(run.request_rate_per_s)
    assert "all at once" in run.label


def test_guidellm_json_and_yaml_hold_the_same_run():
    (from_json,) = read_benchmark(GUIDELLM_JSON)
    (from_yaml,) = read_benchmark(GUIDELLM_YAML)
    assert dataclasses.replace(from_yaml, source=from_json.source) == from_json
    run = from_json
    assert run.tool == "guidellm" and run.model == "example_model"
    assert (run.completed, run.failed, run.settings["incomplete"]) == (46, 0, 1)
    assert run.max_concurrency == 1 and run.request_rate_per_s is None  # synchronous
    assert run.duration_s == 29.997201442718506
    assert run.requests is None  # the report keeps one request of 46: a sample
    tpot = run.latency["tpot"]
    assert tpot.name == "time_per_output_token_ms"
    assert tpot.definition is Definition.TOKEN_WEIGHTED_GAP_PER_OUTPUT_TOKEN
    assert tpot.mean_s == pytest.approx(4.90300272307966e-3)
    assert tpot.percentiles_s[99.9] == pytest.approx(5.217265337705612e-3)
    assert tpot.percentiles_s[0.1] == pytest.approx(4.870360717177391e-3)
    assert run.latency["itl"].definition is Definition.TOKEN_WEIGHTED_GAP_AFTER_FIRST
    assert run.latency["e2e"].mean_s == 0.6444743664368339  # already in seconds
    assert run.mean_output_tokens == pytest.approx(128.0)


def test_guidellm_definitions_reproduce_its_sample_request():
    bench = json.loads(GUIDELLM_JSON.read_text())["benchmarks"][0]
    (req,) = bench["requests"]["successful"]
    times = _requests(
        [req["start_time"]],
        [req["first_token_time"]],
        [req["last_token_time"]],
        [req["output_tokens"]],
    )
    for definition, key in (
        (Definition.TOKEN_WEIGHTED_GAP_PER_OUTPUT_TOKEN, "time_per_output_token_ms"),
        (Definition.TOKEN_WEIGHTED_GAP_AFTER_FIRST, "inter_token_latency_ms"),
        (Definition.TTFT, "time_to_first_token_ms"),
    ):
        (value,), _ = per_request(times, definition)
        assert value * 1e3 == pytest.approx(req[key], rel=1e-6), key


def test_aiperf_01x_export_with_its_requests():
    (run,) = read_benchmark(AIPERF)
    assert run.tool == "aiperf" and run.model == "openai/gpt-oss-20b"
    assert (run.completed, run.failed, run.num_prompts, run.max_concurrency) == (89, 11, 100, 100)
    assert run.duration_s == 9.317788951
    assert run.request_throughput_per_s == 9.551622221540914
    assert run.latency["ttft"].mean_s == pytest.approx(2343.219436988764e-3)
    assert run.latency["ttft"].percentiles_s[1.0] == pytest.approx(581.1957117999999e-3)
    assert run.latency["itl"].name == "inter_token_latency"
    assert run.latency["itl"].definition is Definition.GAP_AFTER_FIRST
    assert run.latency["chunk_gap"].definition is Definition.POOLED_GAPS
    assert run.latency["e2e"].mean_s == pytest.approx(9059.654633033708e-3)
    reqs = run.requests  # profile_export.jsonl found beside it; 11 cancelled left out
    assert reqs is not None and len(reqs.output_tokens) == 89
    assert set(reqs.input_tokens) == {550}
    assert sum(reqs.output_tokens) == 21624  # total_osl: reasoning tokens included
    assert np.mean(reqs.ttft_s) == pytest.approx(run.latency["ttft"].mean_s, rel=1e-12)


def test_aiperf_inter_token_latency_is_vllms_tpot_per_request():
    rows = [json.loads(line) for line in AIPERF_REQUESTS.read_text().splitlines()]
    ok = [r["metrics"] for r in rows if "error" not in r]
    times = _requests(
        np.zeros(len(ok)),
        [m["ttft"]["value"] / 1e3 for m in ok],
        [m["request_latency"]["value"] / 1e3 for m in ok],
        [m["output_sequence_length"]["value"] for m in ok],
    )
    values, _ = per_request(times, Definition.GAP_AFTER_FIRST)
    assert values * 1e3 == pytest.approx([m["inter_token_latency"]["value"] for m in ok], rel=1e-9)


def test_aiperf_1x_layout_at_the_top_level(tmp_path):
    doc = {
        "schema_version": "1.0",
        "aiperf_version": "1.0.0",
        "time_to_first_token": {"unit": "ms", "avg": 120.0, "p50": 110.0, "p99": 300.0},
        "inter_token_latency": {"unit": "ms", "avg": 12.5, "p50": 12.0},
        "request_latency": {"unit": "ms", "avg": 2000.0},
        "request_count": {"unit": "requests", "avg": 50},
        "benchmark_duration": {"unit": "sec", "avg": 25.0},
        "request_throughput": {"unit": "requests/sec", "avg": 2.0},
    }
    (run,) = read_benchmark(write(tmp_path / "profile_export_aiperf.json", json.dumps(doc)))
    assert run.tool_version == "1.0.0" and run.completed == 50 and run.requests is None
    assert run.latency["ttft"].mean_s == pytest.approx(0.120)
    assert run.latency["ttft"].percentiles_s == pytest.approx({50.0: 0.110, 99.0: 0.300})
    assert run.latency["itl"].median_s == pytest.approx(0.012)
    assert run.duration_s == 25.0


def test_guidellm_weighs_each_request_by_its_tokens():
    # two requests, 0.2 s after the first token for 2 tokens and 1.0 s for 11 tokens
    run = _requests([0.0, 0.0], [0.1, 0.1], [0.3, 1.1], [2, 11])
    values, weights = per_request(run, Definition.TOKEN_WEIGHTED_GAP_PER_OUTPUT_TOKEN)
    # GuideLLM's mean time per output token: (0.1 x 2 + (1/11) x 11) / 13 = 1.2 / 13
    assert mean(values, weights) == pytest.approx(1.2 / 13)
    values, weights = per_request(run, Definition.TOKEN_WEIGHTED_GAP_AFTER_FIRST)
    # inter-token latency: (0.2 x 1 + 0.1 x 10) / 11, where vLLM's per-request TPOT is 0.15
    assert mean(values, weights) == pytest.approx(1.2 / 11)
    vllm_values, vllm_weights = per_request(run, Definition.GAP_AFTER_FIRST)
    assert mean(vllm_values, vllm_weights) == pytest.approx(0.15)


def test_a_weighted_percentile_is_numpys_on_the_repeated_samples():
    rng = np.random.default_rng(3)
    for _ in range(50):
        values = rng.random(rng.integers(1, 12))
        weights = rng.integers(0, 6, size=values.size).astype(float)
        if weights.sum() == 0:
            assert percentile(values, weights, 50) is None
            continue
        samples = np.repeat(values, weights.astype(int))
        for q in (0, 0.1, 25, 50, 90, 99, 99.9, 100):
            assert percentile(values, weights, q) == pytest.approx(np.percentile(samples, q))


def _aiperf_with_requests(tmp_path, edit):
    """The AIPerf sample and its per-request export in ``tmp_path``, the first request's
    metrics changed by ``edit``."""
    summary = write(tmp_path / AIPERF.name, AIPERF.read_text())
    lines = AIPERF_REQUESTS.read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if json.loads(line).get("error") is None)
    row = json.loads(lines[first])
    edit(row["metrics"])
    lines[first] = json.dumps(row)
    write(tmp_path / AIPERF_REQUESTS.name, "\n".join(lines) + "\n")
    return summary, first + 1


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (lambda m: m["ttft"].update(value=-5.0), "the time to first token is -0.005 s, below 0"),
        (
            lambda m: m["request_latency"].update(value=m["ttft"]["value"] / 2),
            "ends before the first token",
        ),
    ],
    ids=["negative ttft", "latency before the first token"],
)
def test_aiperf_request_times_out_of_order_are_refused_naming_the_line(tmp_path, edit, reason):
    summary, line = _aiperf_with_requests(tmp_path, edit)
    with pytest.raises(ConfigError, match=f"line {line}: .*{reason}"):
        read_benchmark(summary)


def test_guidellm_request_whose_first_token_precedes_its_start_is_refused(tmp_path):
    doc = json.loads(GUIDELLM_JSON.read_text())
    bench = doc["benchmarks"][0]
    (req,) = bench["requests"]["successful"]
    bench["request_totals"]["successful"] = 1  # the kept request is then the whole run
    req["first_token_time"] = req["start_time"] - 0.25
    path = write(tmp_path / "guidellm.json", json.dumps(doc))
    with pytest.raises(ConfigError, match=r"successful\[0\]: the time to first token is -0.25 s"):
        read_benchmark(path)
