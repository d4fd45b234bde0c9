"""The format of a result file is told from its content; a file of no known format, or a
malformed one, ends ``fleetcast compare`` with one line naming the file and what is wrong, and
exit status 2."""

from __future__ import annotations

import json
import shutil

import pytest

from sim.cli import main
from sim.errors import ConfigError
from sim.harness.formats import pick, read_benchmark
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


@pytest.mark.parametrize(
    ("path", "tool", "runs"),
    [
        (VLLM_70B, "vllm bench serve", 1),
        (VLLM_8B, "vllm bench serve", 1),
        (SGLANG, "sglang bench_serving", 7),
        (GUIDELLM_JSON, "guidellm", 1),
        (GUIDELLM_YAML, "guidellm", 1),
        (AIPERF, "aiperf", 1),
    ],
    ids=lambda v: getattr(v, "name", str(v)),
)
def test_the_format_comes_from_the_content_not_the_name(path, tool, runs, tmp_path):
    renamed = tmp_path / "result.txt"
    shutil.copy(path, renamed)
    found = read_benchmark(renamed)
    assert [r.tool for r in found] == [tool] * runs


def test_one_sglang_line_alone_is_still_sglang(tmp_path):
    first = SGLANG.read_text().splitlines()[0]
    (run,) = read_benchmark(write(tmp_path / "one.jsonl", first + "\n"))
    assert run.tool == "sglang bench_serving" and run.completed == 300


def test_a_shipped_sample_is_named_shipped():
    # as the user named it, not where the installed package keeps it
    name = "shipped:harness_samples/" + VLLM_8B.name
    (run,) = read_benchmark(name)
    assert run.source == name and run.completed == 200


def test_pick_chooses_one_run():
    runs = read_benchmark(SGLANG)
    assert pick(runs, 3, SGLANG).request_rate_per_s == 8.0
    assert pick(read_benchmark(VLLM_8B), None, VLLM_8B).completed == 200
    with pytest.raises(ConfigError, match="holds 7 runs, choose one with --index N"):
        pick(runs, None, SGLANG)
    with pytest.raises(ConfigError, match=r"--index 7: the file holds runs 0..6"):
        pick(runs, 7, SGLANG)


def _vllm(**changes) -> str:
    doc = json.loads(VLLM_8B.read_text())
    for key, value in changes.items():
        if value is None:
            del doc[key]
        else:
            doc[key] = value
    return json.dumps(doc)


def _detailed(**changes) -> str:
    doc = json.loads(VLLM_70B.read_text())
    doc.update(changes)
    return json.dumps(doc)


SGLANG_LINES = SGLANG.read_text().splitlines()


def _aiperf_count(count: float) -> str:
    """The AIPerf sample with another request count."""
    doc = json.loads(AIPERF.read_text())
    doc["records"]["request_count"]["avg"] = count
    return json.dumps(doc)


def test_a_pretty_printed_sglang_result_is_one_run(tmp_path):
    # one run written over many lines (after `jq .`), not JSON lines
    path = tmp_path / "pretty.json"
    path.write_text(json.dumps(json.loads(SGLANG_LINES[0].replace("Infinity", "1e999")), indent=2))
    (run,) = read_benchmark(path)
    assert run.tool == "sglang bench_serving" and run.completed == 300


GUIDE = json.loads(GUIDELLM_JSON.read_text())


def _guide_ttft_mean(mean: float) -> dict:
    """The GuideLLM sample with another mean TTFT."""
    doc = json.loads(GUIDELLM_JSON.read_text())
    doc["benchmarks"][0]["metrics"]["time_to_first_token_ms"]["successful"]["mean"] = mean
    return doc


def _aiperf_ttft_avg(avg: float) -> dict:
    doc = json.loads(AIPERF.read_text())
    doc["records"]["ttft"]["avg"] = avg
    return doc


# (name, file text (None: no file), what the one line says)
MALFORMED = [
    ("missing.json", None, "file not found"),
    ("empty.json", "", "is empty"),
    ("spaces.json", "  \n\n", "is empty"),
    ("text.json", "hello, world", "not JSON, JSON lines or YAML"),
    ("broken.json", '{"completed": 3,', "not JSON, JSON lines or YAML (JSON: Expecting"),
    ("other.json", '{"a": 1}', "not a known benchmark result: expected a vLLM bench serve JSON"),
    ("list.json", "[1, 2]", "not a known benchmark result"),
    ("no_completed.json", _vllm(completed=None), "'completed' is missing"),
    ("text_ttft.json", _vllm(mean_ttft_ms="fast"), "mean_ttft_ms='fast' is not a number"),
    ("nan.json", _vllm(mean_tpot_ms=float("nan")), "mean_tpot_ms=nan is not a number"),
    ("half.json", _vllm(completed=2.5), "completed=2.5 is not a count"),
    ("arrays.json", _detailed(ttfts=[0.1]), "the per-request arrays differ in length"),
    (
        "negative_length.json",
        _detailed(input_lens=[-5, *json.loads(VLLM_70B.read_text())["input_lens"][1:]]),
        "input_lens[0]=-5.0 is not a length (a whole number >= 1)",
    ),
    (
        "fractional_length.json",
        _detailed(output_lens=[2.5, *json.loads(VLLM_70B.read_text())["output_lens"][1:]]),
        "output_lens[0]=2.5 is not a length (a whole number >= 1)",
    ),
    (
        "infinite_ttft.json",
        _detailed(ttfts=[1e999, *json.loads(VLLM_70B.read_text())["ttfts"][1:]]).replace(
            "Infinity", "1e999"
        ),
        "ttfts[0]=inf is not a measured time (seconds)",
    ),
    (
        "negative_gap.json",
        _detailed(itls=[[-0.1], *json.loads(VLLM_70B.read_text())["itls"][1:]]),
        "itls[0] is not a list of finite gaps >= 0 (seconds)",
    ),
    (
        "errors.json",
        _detailed(completed=199),
        "the arrays hold 200 requests without error; completed=199",
    ),
    ("bad_line.jsonl", SGLANG_LINES[0] + "\n{oops\n", "line 2: not JSON"),
    (
        "mixed.jsonl",
        SGLANG_LINES[0] + '\n{"a": 1}\n',
        "run 2 of the SGLang JSONL lacks bench_serving's keys",
    ),
    (
        "no_duration.jsonl",
        json.dumps({**json.loads(SGLANG_LINES[0]), "duration": 0}),
        "line 1: duration=0.0 must be a finite number > 0",
    ),
    ("requests.jsonl", AIPERF_REQUESTS.read_text(), "AIPerf's per-request export: give"),
    (
        "strategy.json",
        json.dumps(
            {"benchmarks": [{**GUIDE["benchmarks"][0], "args": {"strategy": {"type_": "chaos"}}}]}
        ),
        "benchmarks[0].args.strategy.type_='chaos' is not a GuideLLM strategy",
    ),
    (
        "no_benchmarks.json",
        json.dumps({"benchmarks": [{"metrics": {}}]}),
        "'benchmarks[0].request_totals' is missing",
    ),
    (
        "infinite_count.json",
        _aiperf_count(float("inf")).replace("Infinity", "1e999"),
        "request_count.avg=inf is not a count",
    ),
    ("negative_count.json", _aiperf_count(-3), "request_count.avg=-3.0 is not a count"),
    # measured figures no benchmark measures: named by their key, never compared or fitted
    *[
        (name, text, says)
        for name, text, says in (
            (
                "negative_ttft.json",
                _vllm(mean_ttft_ms=-21.6),
                "mean_ttft_ms=-21.6 is not a measured time: it must be finite and above 0",
            ),
            ("zero_ttft.json", _vllm(median_ttft_ms=0.0), "median_ttft_ms=0.0 is not a measured"),
            (
                "infinite_tpot.json",
                _vllm(mean_tpot_ms=float("inf")).replace("Infinity", "1e999"),
                "mean_tpot_ms=inf is not a measured time",
            ),
            (
                "years_ttft.json",
                _vllm(mean_ttft_ms=3e13),
                "mean_ttft_ms=30000000000000.0 is 8.333e+06 hours, more than any benchmark "
                "measures (at most 24 hours)",
            ),
            ("huge_tpot.json", _vllm(p99_tpot_ms=1e300), "p99_tpot_ms=1e+300 is 2.778e+293 hours"),
            (
                "negative_std.json",
                _vllm(std_itl_ms=-0.2),
                "std_itl_ms=-0.2 is not a measured time: it must be finite and >= 0",
            ),
            (
                "tpot_above_e2e.json",
                _vllm(mean_tpot_ms=5000.0, mean_e2el_ms=300.0),
                "mean tpot (5,000 ms) is larger than mean e2el (300 ms), the whole request's time",
            ),
            (
                "ttft_p99_above_e2e.json",
                _vllm(mean_e2el_ms=2000.0, p99_e2el_ms=20.0),
                "p99 ttft (27.93 ms) is larger than p99 e2el (20 ms)",
            ),
            (
                "negative_throughput.json",
                _vllm(output_throughput=-5.0),
                "output_throughput=-5.0 must be a finite number >= 0",
            ),
            (
                "infinite_throughput.json",
                _vllm(request_throughput=float("inf")).replace("Infinity", "1e999"),
                "request_throughput=inf must be a finite number >= 0",
            ),
            ("negative_rate.json", _vllm(request_rate=-4.0), "request_rate=-4.0 must be above 0"),
            ("zero_duration.json", _vllm(duration=0), "duration=0.0 must be a finite number > 0"),
            (
                "sglang_infinite_itl.jsonl",
                json.dumps({**json.loads(SGLANG_LINES[0]), "median_itl_ms": 1e999}),
                "line 1: median_itl_ms=inf is not a measured time",
            ),
            (
                "guidellm_negative_ttft.json",
                json.dumps(_guide_ttft_mean(-3.0)),
                "benchmarks[0].metrics.time_to_first_token_ms.successful.mean=-3.0 is not a "
                "measured time",
            ),
            (
                "aiperf_zero_ttft.json",
                json.dumps(_aiperf_ttft_avg(0.0)),
                "ttft.avg=0.0 is not a measured time",
            ),
        )
    ],
    # a file near a known format is named by the key it lacks
    (
        "vllm_no_throughput.json",
        _vllm(request_throughput=None),
        "not a known benchmark result: has 'mean_ttft_ms' but 'request_throughput' is missing "
        "(a vLLM bench serve JSON); expected a vLLM",
    ),
    (
        "sglang_no_itl.jsonl",
        json.dumps({k: v for k, v in json.loads(SGLANG_LINES[0]).items() if k != "median_itl_ms"}),
        "has 'mean_e2e_latency_ms' but 'median_itl_ms' is missing (an SGLang bench_serving line)",
    ),
    (
        "aiperf_no_latency.json",
        json.dumps({"records": {"ttft": {"unit": "ms", "avg": 3.0}}}),
        "has 'records.ttft' but 'records.request_latency' is missing (an AIPerf",
    ),
    (
        "guidellm_no_metrics.json",
        json.dumps({"benchmarks": [{"duration": 3}]}),
        "no item of 'benchmarks' has 'metrics' (GuideLLM)",
    ),
    ("guidellm_not_list.json", '{"benchmarks": 3}', "'benchmarks' is not a list of benchmarks"),
    ("a_number.json", "42", "the file holds a number, not a result object"),
    (
        "summary.json",
        json.dumps({"ttft_s": {"mean": 0.1}, "throughput": {}, "completed": 3}),
        "it is a Fleetcast run's summary.json, not a benchmark's result",
    ),
    ("a_string.json", '"results"', "the file holds text, not a result object"),
]


@pytest.mark.parametrize(("name", "text", "says"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_file_is_one_line_and_exit_2(name, text, says, tmp_path, capsys):
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(SystemExit) as exit_:
        main(["compare", str(tmp_path), str(path)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"error: bench_file={str(path)!r}: "), err
    assert says in err, err


def test_a_folder_or_binary_file_is_refused(tmp_path, capsys):
    binary = tmp_path / "result.bin"
    binary.write_bytes(bytes(range(256)))
    for path, says in ((tmp_path, "is a folder"), (binary, "not a text file")):
        with pytest.raises(SystemExit) as exit_:
            main(["compare", str(tmp_path), str(path)])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.count("\n") == 1 and says in err, err


def test_a_file_of_several_runs_needs_index_and_a_run_dir_must_be_a_finished_run(tmp_path, capsys):
    for argv, says in (
        (
            [str(tmp_path), str(SGLANG)],
            "holds 7 runs, choose one with --index N (0: line 1: random",
        ),
        ([str(tmp_path), str(SGLANG), "--index", "9"], "--index 9: the file holds runs 0..6"),
        ([str(tmp_path), str(VLLM_8B)], f"error: run_dir={str(tmp_path)!r}: no summary.json"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(["compare", *argv])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.count("\n") == 1 and says in err, err


def test_a_yaml_file_above_the_limit_is_refused_at_once(tmp_path, capsys, monkeypatch):
    # YAML parses at about a megabyte a second: a large one is refused, not read for minutes
    # (the limit made small here, so that the test writes a small file)
    monkeypatch.setattr("sim.harness.parsing.MAX_YAML_BYTES", 10_000)
    path = write(tmp_path / "report.yaml", GUIDELLM_YAML.read_text())
    assert path.stat().st_size > 10_000
    with pytest.raises(SystemExit) as exit_:
        main(["compare", str(tmp_path), str(path)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1, err
    assert "too large to read as YAML (0.0254 MiB, the limit is 0.00954 MiB): give the JSON" in err
    monkeypatch.setattr("sim.harness.parsing.MAX_YAML_BYTES", 10**9)
    assert read_benchmark(path)[0].tool == "guidellm"  # under the limit it reads


def test_errors_name_a_shipped_file_as_given(tmp_path, capsys):
    name = "shipped:harness_samples/" + SGLANG.name
    with pytest.raises(SystemExit):
        main(["compare", str(tmp_path), name])
    err = capsys.readouterr().err
    assert err.startswith(f"error: bench_file={name!r}: holds 7 runs"), err
