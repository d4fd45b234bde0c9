"""The promise about bad input (docs/reference/errors.md), row by row: every bad config value and
every malformed trace below stops ``fleetcast`` with exit status 2 and one line on stderr,
``error: `` and then the field (or the trace file) with its value, no traceback, and no
summary.json.

The rows run in this process (``sim.cli.main``, as the command calls it); a few run as real
subprocesses too, where an uncaught exception would print a traceback.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sim.cli import main
from tests.support import fleetcast

HEADER = "arrival_time_s,prompt_tokens,output_tokens\n"
POISSON = ["workload=poisson", "workload.num_requests=5"]
AZURE_CONV = "shipped:traces/azure_llm_2023_conv.parquet"
PERIOD = "{{start_hour:{},end_hour:{},prompt_tokens:9}}"  # a daily workload's period

# (id, overrides, what the error line starts with after "error: ")
UNSET = "${oc.env:FLEETCAST_UNSET_FOR_TESTS}"  # an environment variable no one sets

CONFIG_VALUES: list[tuple[str, list[str], str]] = [
    # interpolations that cannot be resolved: the key and the value as written
    ("unset environment variable", [f"fleet.replicas={UNSET}"], f"fleet.replicas='{UNSET}'"),
    ("interpolation of no key", ["seed=${no.such.key}"], "seed='${no.such.key}'"),
    ("unknown resolver", ["fleet.replicas=${nope:1}"], "fleet.replicas='${nope:1}'"),
    # types first: text, fractions and non-booleans where a number, an integer or a bool belongs
    ("watermark text", ["kv.watermark=abc"], "kv.watermark='abc'"),
    # an autoscaled fleet (sim.fleet.autoscaler)
    ("autoscale policy", ["autoscale.policy=hpa"], "autoscale.policy='hpa'"),
    ("autoscale provision negative", ["autoscale.provision_s=-1"], "autoscale.provision_s=-1"),
    (
        "autoscale min above max",
        ["autoscale.policy=kv", "autoscale.min_replicas=9", "autoscale.max_replicas=2"],
        "autoscale.min_replicas=9",
    ),
    ("autoscale schedule missing", ["autoscale.policy=schedule"], "autoscale.schedule=None"),
    (
        "autoscale schedule late start",
        ["autoscale.policy=schedule", "autoscale.schedule=[{at_s: 5, replicas: 1}]"],
        "autoscale.schedule[0].at_s=5.0",
    ),
    (
        "autoscale unknown engine",
        ["autoscale.policy=schedule", "autoscale.schedule=[{at_s: 0, replicas: 1, engine: x}]"],
        "autoscale.schedule[0].engine='x'",
    ),
    (
        "autoscale engine changes the model",
        [
            "autoscale.policy=schedule",
            "autoscale.schedule=[{at_s: 0, replicas: 1, engine: x}]",
            "+autoscale.engines={x: {model: llama2_7b}}",
        ],
        "autoscale.engines.x.model='llama2_7b'",
    ),
    (
        "autoscale fleet outside its bounds",
        ["autoscale.policy=concurrency", "autoscale.max_replicas=2", "fleet.replicas=3"],
        "fleet.replicas=3",
    ),
    ("max_num_seqs text", ["scheduler.max_num_seqs=abc"], "scheduler.max_num_seqs='abc'"),
    (
        "constant seconds text",
        ["step_time=constant", "step_time.seconds=abc"],
        "step_time.seconds=",
    ),
    ("linear c0 text", ["step_time=linear", "step_time.c0=abc"], "step_time.c0='abc'"),
    ("max_num_seqs fraction", ["scheduler.max_num_seqs=2.5"], "scheduler.max_num_seqs=2.5"),
    ("chunked prefill maybe", ["scheduler.enable_chunked_prefill=maybe"], "scheduler.enable_chu"),
    ("fast forward maybe", ["sim.fast_forward_decode=maybe"], "sim.fast_forward_decode="),
    ("progress maybe", ["sim.progress=maybe"], "sim.progress='maybe'"),
    ("tp text", ["fleet.tp=abc"], "fleet.tp='abc'"),
    ("seed text", ["seed=abc"], "seed='abc'"),
    ("replicas bool", ["fleet.replicas=true"], "fleet.replicas=True"),
    # finite and bounded
    ("constant seconds inf", ["step_time=constant", "step_time.seconds=inf"], "step_time.seconds="),
    ("constant seconds nan", ["step_time=constant", "step_time.seconds=nan"], "step_time.seconds="),
    ("replicas 1e30", ["fleet.replicas=1e30"], "fleet.replicas="),
    ("num_requests 1e30", [*POISSON[:1], "workload.num_requests=1e30"], "workload.num_requests="),
    ("prompt 1e30", [*POISSON, "workload.prompt_tokens=1e30"], "workload.prompt_tokens="),
    ("prompt 3e9", [*POISSON, "workload.prompt_tokens=3000000000"], "workload.prompt_tokens="),
    ("qps inf", [*POISSON, "workload.qps=inf"], "workload.qps="),
    ("replicas 0", ["fleet.replicas=0"], "fleet.replicas=0"),
    ("replicas negative", ["fleet.replicas=-1"], "fleet.replicas=-1"),
    ("tp 3", ["fleet.tp=3"], "fleet.tp=3"),
    ("block size 0", ["kv.block_size=0"], "kv.block_size=0"),
    ("num_blocks negative", ["kv.num_blocks=-5"], "kv.num_blocks=-5"),
    ("watermark 1.5", ["kv.watermark=1.5"], "kv.watermark=1.5"),
    ("utilization 0", ["memory.gpu_memory_utilization=0"], "memory.gpu_memory_utilization=0"),
    ("utilization 1.2", ["memory.gpu_memory_utilization=1.2"], "memory.gpu_memory_utilization="),
    ("reserve negative", ["memory.activation_reserve_gib=-1"], "memory.activation_reserve_gib="),
    ("qps negative", [*POISSON, "workload.qps=-1"], "workload.qps=-1"),
    ("qps zero", [*POISSON, "workload.qps=0"], "workload.qps=0"),
    ("output tokens zero", [*POISSON, "workload.output_tokens=0"], "workload.output_tokens=0"),
    ("gamma cv zero", ["workload=gamma", "workload.cv=0"], "workload.cv=0"),
    ("concurrency zero", ["workload=closed_loop", "workload.concurrency=0"], "workload.concur"),
    ("rate scale zero", ["workload.rate_scale=0"], "workload.rate_scale=0"),
    ("duration negative", ["workload.duration_s=-5"], "workload.duration_s=-5"),
    ("horizon zero", ["sim.horizon_s=0"], "sim.horizon_s=0"),
    ("seed negative", ["seed=-1"], "seed=-1"),
    ("ttft slo negative", ["slo.ttft_s=-1"], "slo.ttft_s=-1"),
    ("frontend negative", ["frontend.token_s=-1"], "frontend.token_s=-1"),
    ("linear c0 negative", ["step_time=linear", "step_time.c0=-1"], "step_time.c0=-1"),
    ("traffic share 2", ["placement=colocated", "placement.traffic_share=2"], "placement.traff"),
    (
        "pools beyond the fleet",
        ["placement=disaggregated", "fleet.replicas=2", "placement.prefill.replicas=2"],
        "placement.prefill.replicas=2",
    ),
    ("kv link unknown", ["placement=disaggregated", "placement.kv_link=pigeon"], "placement.kv_l"),
    (
        "decode pool gpu unknown",
        ["placement=disaggregated", "placement.decode.hardware=h900"],
        "placement.decode.hardware='h900'",
    ),
    ("steps mode", ["output.steps=some"], "output.steps='some'"),
    ("bucket zero", ["output.step_bucket_s=0"], "output.step_bucket_s=0"),
    ("length dist unknown", [*POISSON, "workload.prompt_tokens={dist:nope}"], "workload.prompt"),
    (
        "uniform low above high",
        [*POISSON, "workload.prompt_tokens={dist:uniform,low:10,high:5}"],
        "workload.prompt_tokens",
    ),
    # a day's traffic (sim.workload.day)
    (
        "profile with profile_trace",
        ["workload=daily", f"workload.profile_trace={AZURE_CONV}"],
        f"workload.profile_trace='{AZURE_CONV}': cannot be set together with workload.profile",
    ),
    (
        "lengths_trace with pattern",
        ["workload=azure_day", "workload.pattern=long_in_long_out"],
        f"workload.lengths_trace='{AZURE_CONV}': cannot be set together with workload.pattern",
    ),
    (
        "lengths_trace with periods",
        ["workload=azure_day", f"workload.periods=[{PERIOD.format(0, 7)}]"],
        f"workload.lengths_trace='{AZURE_CONV}': cannot be set together with workload.periods",
    ),
    (
        "period ends before it starts",
        ["workload=daily", f"workload.periods=[{PERIOD.format(8, 7)}]"],
        "workload.periods.0.end_hour=7: must be above start_hour (8)",
    ),
    (
        "period past midnight",
        ["workload=daily", f"workload.periods=[{PERIOD.format(22, 30)}]"],
        "workload.periods.0.end_hour=30: must be <= 24",
    ),
    (
        "periods overlap",
        ["workload=daily", f"workload.periods=[{PERIOD.format(0, 8)},{PERIOD.format(7, 9)}]"],
        "workload.periods=",
    ),
    (
        "profile_trace missing",
        ["workload=daily", "workload.profile=null", "workload.profile_trace=none.parquet"],
        "workload.profile_trace='none.parquet': file not found",
    ),
    (
        "lengths_trace missing",
        ["workload=daily", "workload.duration_s=60", "workload.lengths_trace=none.parquet"],
        "workload.lengths_trace='none.parquet': file not found",
    ),
    # unknown names and keys, with + too
    ("unknown model", ["model=nonexistent"], "model='nonexistent'"),
    ("unknown hardware", ["hardware=nonexistent"], "hardware='nonexistent'"),
    ("unknown scheduler", ["scheduler=nonexistent"], "scheduler='nonexistent'"),
    ("unknown router", ["router=nonexistent"], "router='nonexistent'"),
    ("weights int4", ["precision.weights=int4"], "precision.weights='int4'"),
    ("kv fp4", ["precision.kv=fp4"], "precision.kv='fp4'"),
    ("plus fleet key", ["+fleet.bogus=1"], "fleet.bogus=1"),
    ("plus memory key", ["+memory.bogus=1"], "memory.bogus=1"),
    ("plus kv key", ["+kv.bogus=1"], "kv.bogus=1"),
    ("plus scheduler key", ["+scheduler.bogus=1"], "scheduler.bogus=1"),
    ("hardware key", ["hardware.bogus=1"], "hardware.bogus='1': unknown key in hardware=h100"),
    (
        "top-level key",
        ["bogus=1"],
        "bogus='1': unknown key in config.yaml; known: autoscale, cost,",
    ),
    # Hydra's grammar
    ("unclosed brace", ["workload.qps={"], "workload.qps='{'"),
    ("unclosed bracket", ["fleet.replicas=[1,2"], "fleet.replicas='[1,2'"),
    # deployments that cannot be
    ("70b on one a100", ["model=llama31_70b", "hardware=a100_80g"], "hardware='A100-80G-SXM'"),
    ("fp4 on l40s", ["hardware=l40s", "precision.weights=fp4"], "precision.weights='fp4'"),
    (
        "every request beyond the context",
        [*POISSON, "model=llama2_7b", "workload.prompt_tokens=8000"],
        "workload.prompt_tokens=8000",
    ),
    (
        "every request beyond the KV cache",
        [*POISSON, "kv.num_blocks=10", "workload.prompt_tokens=1000"],
        "workload.prompt_tokens=1000",
    ),
    # faults (sim.config.faults, sim.deploy.faulty)
    ("mtbf negative", ["faults.gpu_mtbf_h=-1"], "faults.gpu_mtbf_h=-1: must be >= 0"),
    ("repair unknown", ["faults.repair=weibull"], "faults.repair='weibull'"),
    ("repair zero", ["faults.repair_h=0"], "faults.repair_h=0"),
    ("on failure unknown", ["faults.on_failure=maybe"], "faults.on_failure='maybe'"),
    (
        "failure of no replica",
        ["faults.schedule=[{replica: 4, at_s: 1}]"],
        "faults.schedule[0].replica=4: is not a replica of this fleet (ids 0 to 3)",
    ),
    (
        "drain without a duration",
        ["faults.maintenance=[{replica: 0, at_s: 1}]"],
        "faults.maintenance.0.duration_s",
    ),
    (
        "reclaim notice negative",
        ["faults.spot=[{replica: 0, at_s: 1, notice_s: -1}]"],
        "faults.spot.0.notice_s=-1",
    ),
    (
        "faults repaired on an autoscaled fleet",
        ["autoscale.policy=utilization", "faults.schedule=[{replica: 0, at_s: 1, repair_s: 5}]"],
        "faults.schedule[0].repair_s=5.0: the autoscaler replaces a failed replica",
    ),
    (
        "faults replaced on an autoscaled fleet",
        ["autoscale.policy=utilization", "faults.spot=[{replica: 0, at_s: 1, replace_s: 5}]"],
        "faults.spot[0].replace_s=5.0: the autoscaler replaces a reclaimed replica",
    ),
    (
        "failure of no replica of a disaggregated fleet",
        [
            "placement=disaggregated",
            "fleet.replicas=4",
            "placement.prefill.replicas=1",
            "faults.schedule=[{replica: 4, at_s: 1}]",
        ],
        "faults.schedule[0].replica=4: is not a replica of this fleet (ids 0 to 3)",
    ),
    (
        "faults with a frontend",
        ["faults.gpu_mtbf_h=1000", "frontend.token_s=0.001"],
        "frontend.token_s=0.001: faults are not modelled with a frontend",
    ),
    # speculative decoding (sim.deploy.speculation)
    ("draft tokens 17", ["spec_decode.num_draft_tokens=17"], "spec_decode.num_draft_tokens=17"),
    ("acceptance 1.5", ["spec_decode.acceptance_rate=1.5"], "spec_decode.acceptance_rate=1.5"),
    ("draft method", ["spec_decode.method=eagle"], "spec_decode.method='eagle'"),
    ("draft cost negative", ["spec_decode.draft_cost=-1"], "spec_decode.draft_cost=-1"),
    (
        "acceptance list too short",
        ["spec_decode.num_draft_tokens=3", "spec_decode.acceptance_rate=[0.9,0.8]"],
        "spec_decode.acceptance_rate=[0.9, 0.8]: has 2 positions",
    ),
    (
        "draft model unnamed",
        ["spec_decode.num_draft_tokens=2", "spec_decode.method=draft_model"],
        "spec_decode.draft_model=None",
    ),
    (
        "draft model bigger",
        [
            "spec_decode.num_draft_tokens=2",
            "spec_decode.method=draft_model",
            "spec_decode.draft_model=llama31_70b",
        ],
        "spec_decode.draft_model='llama31_70b': Llama-3.1-70B (70.6B parameters) is bigger",
    ),
    (
        "draft model of another vocabulary",
        [
            "model=llama31_70b",
            "fleet.tp=4",
            "spec_decode.num_draft_tokens=2",
            "spec_decode.method=draft_model",
            "spec_decode.draft_model=llama2_7b",
        ],
        "spec_decode.draft_model='llama2_7b': its vocabulary (32,000 tokens)",
    ),
    (
        "speculating two models",
        [
            "placement=colocated",
            "placement.second_model=llama2_7b",
            "spec_decode.num_draft_tokens=2",
        ],
        "spec_decode.num_draft_tokens=2: is not modelled with placement=colocated",
    ),
    (
        "budget below a decode's drafts",
        ["spec_decode.num_draft_tokens=4", "scheduler.max_num_batched_tokens=3"],
        "scheduler.max_num_batched_tokens=3: must be >= 1 + spec_decode.num_draft_tokens (5)",
    ),
]


def _text(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _parquet(path: Path, **columns: list) -> Path:
    pq.write_table(pa.table(columns), path)
    return path


# (id, makes the trace file in a folder, what the error says after the file's name)
TRACES: list[tuple[str, Callable[[Path], Path], str]] = [
    ("missing file", lambda d: d / "none.parquet", "file not found"),
    ("directory", lambda d: d, "is a folder, not a file"),
    ("empty csv", lambda d: _text(d / "t.csv", ""), "cannot read as CSV"),
    ("header only", lambda d: _text(d / "t.csv", HEADER), "trace has no rows"),
    (
        "missing column",
        lambda d: _text(d / "t.csv", "arrival_time_s,prompt_tokens\n0,1\n"),
        "missing column(s) output_tokens",
    ),
    (
        "text cell",
        lambda d: _text(d / "t.csv", HEADER + "0,10,5\n1,abc,6\n"),
        "row 2, column prompt_tokens: 'abc' is not a number",
    ),
    (
        "empty cell",
        lambda d: _text(d / "t.csv", HEADER + "0,10,5\n1,,6\n"),
        "row 2, column prompt_tokens: empty or NaN",
    ),
    (
        "negative tokens",
        lambda d: _text(d / "t.csv", HEADER + "0,10,5\n1,10,-3\n"),
        "row 2, column output_tokens: -3 must be >= 1",
    ),
    (
        "zero tokens",
        lambda d: _text(d / "t.csv", HEADER + "0,0,5\n"),
        "row 1, column prompt_tokens: 0 must be >= 1",
    ),
    (
        "fractional tokens",
        lambda d: _text(d / "t.csv", HEADER + "0,2.5,5\n"),
        "row 1, column prompt_tokens: 2.5 is not a whole number",
    ),
    (
        "nan arrival",
        lambda d: _text(d / "t.csv", HEADER + "0,10,5\nnan,3,6\n"),
        "row 2, column arrival_time_s: empty or NaN",
    ),
    (
        "inf arrival",
        lambda d: _text(d / "t.csv", HEADER + "0,10,5\ninf,3,6\n"),
        "row 2, column arrival_time_s: inf is not a finite time",
    ),
    (
        "negative arrival",
        lambda d: _text(d / "t.csv", HEADER + "-1,10,5\n"),
        "row 1, column arrival_time_s: -1 must be >= 0",
    ),
    (
        "unsorted",
        lambda d: _text(d / "t.csv", HEADER + "0,10,5\n2,10,5\n1,10,5\n"),
        "row 3, column arrival_time_s: 1 is earlier than the row before",
    ),
    (
        "3e9-token prompt",
        lambda d: _text(d / "t.csv", HEADER + "0,10,5\n1,3000000000,6\n"),
        "row 2, column prompt_tokens: 3000000000 is above 2,147,483,647",
    ),
    (
        "1e30-token prompt",
        lambda d: _parquet(
            d / "t.parquet", arrival_time_s=[0.0], prompt_tokens=[1e30], output_tokens=[1]
        ),
        "row 1, column prompt_tokens: 1e+30 is above 2,147,483,647",
    ),
    (
        "beyond the model's context",
        lambda d: _text(d / "t.csv", HEADER + "0,10,5\n1,300000,6\n"),
        "row 2, columns prompt_tokens + output_tokens: 300,000 + 6 is refused",
    ),
    (
        "parquet of text",
        lambda d: _parquet(
            d / "t.parquet", arrival_time_s=[0.0], prompt_tokens=["a"], output_tokens=[1]
        ),
        "row 1, column prompt_tokens: 'a' is not a number",
    ),
    (
        "parquet of booleans",
        lambda d: _parquet(
            d / "t.parquet", arrival_time_s=[0.0], prompt_tokens=[True], output_tokens=[1]
        ),
        "row 1, column prompt_tokens: True is not a number",
    ),
    (
        "garbage parquet",
        lambda d: _text(d / "t.parquet", "\x00\x01 not parquet at all " * 20),
        "cannot read as Parquet",
    ),
    (
        "gzip that is not gzip",
        lambda d: _text(d / "t.csv.gz", HEADER + "0,1,1\n"),
        "cannot read as CSV",
    ),
    (
        "gzip of a bad header",
        lambda d: (d / "t.csv.gz").write_bytes(gzip.compress(b"a,b,c\n1,2,3\n")) and d / "t.csv.gz",
        "missing column(s) arrival_time_s, prompt_tokens, output_tokens",
    ),
    (
        "UTF-16 with its BOM",
        lambda d: (d / "t.csv").write_bytes((HEADER + "0,1,1\n").encode("utf-16")) and d / "t.csv",
        "t.csv",
    ),
]


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    return int(stopped.value.code or 0), capsys.readouterr().err


def _assert_refused(code: int, stderr: str, starts: str, out: Path) -> None:
    lines = stderr.splitlines()
    assert code == 2, stderr
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"error: {starts}"), lines[0]
    assert "Traceback" not in stderr
    assert not (out / "summary.json").exists()


@pytest.mark.parametrize(
    "overrides, starts", [row[1:] for row in CONFIG_VALUES], ids=[row[0] for row in CONFIG_VALUES]
)
def test_bad_config_values(overrides, starts, tmp_path, capsys):
    out = tmp_path / "run"
    code, stderr = _run(["sim.progress=false", *overrides, f"output_dir={out}"], capsys)
    _assert_refused(code, stderr, starts, out)


@pytest.mark.parametrize("make, says", [row[1:] for row in TRACES], ids=[row[0] for row in TRACES])
def test_malformed_traces(make, says, tmp_path, capsys):
    folder = tmp_path / "traces"
    folder.mkdir()
    path = make(folder)
    out = tmp_path / "run"
    argv = ["workload=trace", f"workload.path={path}", f"output_dir={out}", "sim.progress=false"]
    code, stderr = _run(argv, capsys)
    _assert_refused(code, stderr, f"workload.path='{path}'", out)
    assert says in stderr


def test_output_dir_that_is_a_file_or_cannot_be_written(tmp_path, capsys):
    a_file = tmp_path / "taken"
    a_file.write_text("")
    for out, says in ((a_file, "is a file, not a folder"), (a_file / "run", "cannot be written")):
        code, stderr = _run([f"output_dir={out}"], capsys)
        _assert_refused(code, stderr, f"output_dir='{out}'", tmp_path)
        assert says in stderr


def test_an_interpolated_output_dir_is_checked_once_resolved(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, stderr = _run([f"output_dir={UNSET}/run"], capsys)
    _assert_refused(code, stderr, f"output_dir='{UNSET}/run': cannot be resolved", tmp_path)
    assert list(tmp_path.iterdir()) == []  # no folder named after the interpolation
    (tmp_path / "taken").write_text("")
    monkeypatch.setenv("FLEETCAST_TEST_RUNS", str(tmp_path))
    code, stderr = _run(["output_dir=${oc.env:FLEETCAST_TEST_RUNS}/taken"], capsys)
    _assert_refused(code, stderr, f"output_dir='{tmp_path}/taken': is a file", tmp_path)


def test_the_table_is_as_large_as_promised():
    assert len(CONFIG_VALUES) + len(TRACES) + 2 >= 60


@pytest.mark.parametrize(
    "overrides",
    [
        ["kv.watermark=abc"],
        ["workload.qps={"],
        ["+fleet.bogus=1"],
        ["step_time.c0=abc"],
        ["workload.periods=[{start_hour:9,end_hour:3,output_tokens:9}]", "workload=daily"],
        [f"fleet.replicas={UNSET}"],
    ],
    ids=["type", "grammar", "plus key", "other group's key", "a day's period", "interpolation"],
)
def test_bad_input_as_a_real_command(overrides, tmp_path):
    out = tmp_path / "run"
    proc = fleetcast(*overrides, f"output_dir={out}", cwd=tmp_path)
    _assert_refused(proc.returncode, proc.stderr, overrides[0].lstrip("+").split("=")[0], out)


def test_good_traces_in_the_same_formats_load(tmp_path, capsys):
    # the formats of the table's bad rows, well-formed: gzip, a UTF-8 byte-order mark
    body = HEADER + "0,10,5\n0.5,20,6\n"
    traces = {
        "t.csv.gz": gzip.compress(body.encode()),
        "bom.csv": b"\xef\xbb\xbf" + body.encode(),
    }
    for name, data in traces.items():
        (tmp_path / name).write_bytes(data)
        out = tmp_path / f"run-{name}"
        main(
            [
                "workload=trace",
                f"workload.path={tmp_path / name}",
                f"output_dir={out}",
                "sim.progress=false",
            ]
        )
        assert (out / "summary.json").exists()
        assert "requests: 2 (2 completed" in capsys.readouterr().out
