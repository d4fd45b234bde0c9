"""``fleetcast compare`` on small simulated runs: every figure computed by hand, from the hand
arithmetic of a one-at-a-time closed loop, or from the run's own requests.parquet."""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

from sim.errors import ConfigError
from sim.harness.compare import comparison, format_comparison
from sim.harness.formats import read_benchmark
from sim.harness.simulated import read_run
from sim.output.run_files import write_run
from sim.resources import data_dir
from sim.run import simulate
from tests.harness.samples import AIPERF, GUIDELLM_JSON, VLLM_70B
from tests.support import compose, fleetcast


@pytest.fixture(scope="module")
def one_at_a_time(tmp_path_factory):
    """Four requests of 100 prompt and 5 output tokens, one in flight at a time, every step
    10 ms: the prefill step ends with the first token (TTFT 10 ms), four decode steps follow
    (E2E 50 ms), and the next request is sent as one completes (4 requests in 0.2 s)."""
    return write_run(
        simulate(
            compose(
                "workload=closed_loop",
                "workload.concurrency=1",
                "workload.prompt_tokens=100",
                "workload.output_tokens=5",
                "workload.num_requests=4",
                "step_time=constant",
                "step_time.seconds=0.01",
            )
        ),
        tmp_path_factory.mktemp("closed"),
    )


@pytest.fixture(scope="module")
def poisson_run(tmp_path_factory):
    """Requests of 1 to 30 output tokens (a single token has no gap) under load."""
    return write_run(
        simulate(
            compose(
                "workload=poisson",
                "workload.qps=30",
                "workload.num_requests=60",
                "workload.prompt_tokens={dist: uniform, low: 50, high: 400}",
                "workload.output_tokens={dist: uniform, low: 1, high: 30}",
                "step_time=constant",
                "step_time.seconds=0.02",
                "seed=5",
            )
        ),
        tmp_path_factory.mktemp("poisson"),
    )


def _rows(run_dir, path, index=None):
    runs = read_benchmark(path)
    return {row.metric: row for row in comparison(read_run(run_dir), runs[index or 0])}


def test_guidellm_figures_in_guidellms_definitions(one_at_a_time):
    rows = _rows(one_at_a_time, GUIDELLM_JSON)
    assert rows["TTFT (time_to_first_token_ms) mean"].simulated == pytest.approx(0.010)
    # GuideLLM's TPOT counts the first token: 40 ms after it over 5 tokens
    tpot = rows["TPOT (time_per_output_token_ms) mean"]
    assert tpot.simulated == pytest.approx(0.008)
    assert tpot.measured == pytest.approx(4.90300272307966e-3)
    assert tpot.relative_error == pytest.approx(0.008 / 4.90300272307966e-3 - 1)
    # its inter-token latency does not: 40 ms over 4 gaps
    assert rows["ITL (inter_token_latency_ms) p99.9"].simulated == pytest.approx(0.010)
    assert rows["E2E (request_latency) median"].simulated == pytest.approx(0.050)
    assert rows["request throughput"].simulated == pytest.approx(4 / 0.2)
    assert rows["output throughput"].simulated == pytest.approx(20 / 0.2)
    assert rows["completed requests"].simulated == 4 and rows["completed requests"].measured == 46


def test_vllm_figures_from_the_runs_own_requests(poisson_run):
    table = pq.read_table(poisson_run / "requests.parquet").to_pylist()
    done = [r for r in table if r["status"] == "completed"]
    assert any(r["output_tokens"] == 1 for r in done)  # the case vLLM's TPOT leaves out
    ttft = [r["first_token_time_s"] - r["arrival_time_s"] for r in done]
    after = [(r["completion_time_s"] - r["first_token_time_s"], r["output_tokens"]) for r in done]
    tpots = [t / (n - 1) for t, n in after if n > 1]
    pooled_mean = sum(t for t, n in after) / sum(n - 1 for t, n in after)
    span = max(r["completion_time_s"] for r in done) - min(r["arrival_time_s"] for r in table)

    rows = _rows(poisson_run, VLLM_70B)
    assert rows["TTFT mean"].simulated == pytest.approx(np.mean(ttft))
    assert rows["TTFT p99"].simulated == pytest.approx(np.percentile(ttft, 99))
    assert rows["TPOT mean"].simulated == pytest.approx(np.mean(tpots))
    assert rows["TPOT median"].simulated == pytest.approx(np.median(tpots))
    assert rows["ITL mean"].simulated == pytest.approx(pooled_mean)
    # pooled: each request's gaps, all at its mean gap, one sample per gap
    gaps = [t / (n - 1) for t, n in after for _ in range(n - 1)]
    assert rows["ITL p99"].simulated == pytest.approx(np.percentile(gaps, 99))
    assert rows["request throughput"].simulated == pytest.approx(len(done) / span)
    outputs = sum(r["output_tokens"] for r in done)
    assert rows["output throughput"].simulated == pytest.approx(outputs / span)
    assert rows["TPOT mean"].measured == pytest.approx(27.083319078977674e-3)
    assert not any("E2E" in name for name in rows)  # the file has no E2E statistics


def test_aiperf_rows_and_the_printed_table(one_at_a_time):
    (measured,) = read_benchmark(AIPERF)
    run = read_run(one_at_a_time)
    rows = {row.metric: row for row in comparison(run, measured)}
    assert rows["ITL (inter_token_latency) median"].simulated == pytest.approx(0.010)
    assert rows["chunk gap (inter_chunk_latency) mean"].simulated == pytest.approx(0.010)
    text = format_comparison(str(one_at_a_time), run, measured)
    assert "note: the run completed 4 requests, the benchmark 89" in text
    assert "ITL (inter_token_latency): (last - first) / (output_tokens - 1)" in text
    line = next(line for line in text.splitlines() if line.startswith("TTFT mean"))
    assert line.split()[-1] == f"{0.010 / 2343.219436988764e-3 - 1:+.1%}"


def test_the_command(one_at_a_time, tmp_path):
    done = fleetcast("compare", str(one_at_a_time), str(GUIDELLM_JSON), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "TPOT (time_per_output_token_ms) mean" in done.stdout
    assert "(last - first) / output_tokens per request, weighted by output_tokens" in done.stdout


def test_a_shipped_file_is_printed_as_the_user_named_it(one_at_a_time, tmp_path):
    name = "shipped:harness_samples/" + GUIDELLM_JSON.name
    done = fleetcast("compare", str(one_at_a_time), name, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"measured:  {name} [guidellm" in done.stdout
    assert str(data_dir()) not in done.stdout  # not where the installed package keeps it


@pytest.mark.parametrize(
    "broken, says",
    [
        ({"summary.json": "{bad"}, "summary.json cannot be read: Expecting property name"),
        ({"summary.json": "[1]"}, "summary.json is not a run's summary (an object whose"),
        ({"summary.json": '{"warmup_requests": "2"}'}, "summary.json is not a run's summary"),
        ({"requests.parquet": ""}, "requests.parquet cannot be read: Could not open Parquet"),
        ({"requests.parquet": "PAR1 truncated"}, "requests.parquet cannot be read: Could not"),
    ],
    ids=["summary_not_json", "summary_a_list", "warmups_text", "empty_parquet", "truncated"],
)
def test_a_broken_run_folder_is_one_line_naming_its_file(one_at_a_time, tmp_path, broken, says):
    folder = tmp_path / "run"
    shutil.copytree(one_at_a_time, folder)
    for name, text in broken.items():
        (folder / name).write_text(text)
    with pytest.raises(ConfigError) as err:
        read_run(folder)
    assert str(err.value).startswith(f"run_dir={str(folder)!r}: {says}"), str(err.value)
