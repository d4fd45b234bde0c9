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
    (run,) = read_benchmark("shipped:harness_samples/" + VLLM_8B.name)
    assert run.source == str(VLLM_8B) and run.completed == 200


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
        "line 1: duration=0.0 must be > 0",
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
