"""Trace replay: filters on the shipped traces, CSV == Parquet, bad files, every config builds."""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from sim.errors import ConfigError
from sim.resources import config_dir
from sim.workload import build_workload
from sim.workload.traces import load_trace

AZURE_CONV = "shipped:traces/azure_llm_2023_conv.parquet"
MOONCAKE = "shipped:traces/mooncake_fast25_conversation.parquet"


def trace(**fields) -> dict:
    return {"kind": "trace", "path": AZURE_CONV, **fields}


def test_shipped_traces_load_whole():
    assert load_trace(AZURE_CONV).num_requests == 19_366
    assert load_trace("shipped:traces/azure_llm_2023_code.parquet").num_requests == 8_819
    assert load_trace(MOONCAKE).num_requests == 12_031


def test_duration_keeps_the_first_600_seconds():
    w = build_workload(trace(duration_s=600), 0)
    assert w.num_requests == 2_867
    assert w.arrival_time_s[0] == 0.0 and w.arrival_time_s[-1] < 600.0
    assert w.prompt_tokens.dtype == np.int64 and w.arrival_time_s.dtype == np.float64


def test_num_requests_keeps_the_first_n():
    w = build_workload(trace(num_requests=100), 0)
    full = load_trace(AZURE_CONV)
    assert w.num_requests == 100
    assert np.array_equal(w.prompt_tokens, full.prompt_tokens[:100])
    assert np.array_equal(w.arrival_time_s, full.arrival_time_s[:100])


def test_rate_scale_divides_times_after_the_window():
    plain = build_workload(trace(duration_s=600), 0)
    fast = build_workload(trace(duration_s=600, rate_scale=2.0), 0)
    # The window counts original seconds, so the same requests arrive twice as fast.
    assert fast.num_requests == 2_867
    np.testing.assert_allclose(fast.arrival_time_s, plain.arrival_time_s / 2.0)


def test_start_s_windows_and_rebases():
    full = load_trace(AZURE_CONV).arrival_time_s
    w = build_workload(trace(start_s=600, duration_s=600), 0)
    expected = full[(full >= 600) & (full < 1200)] - 600
    assert w.num_requests == expected.size
    np.testing.assert_array_equal(w.arrival_time_s, expected)


def test_spread_ticks_spreads_mooncake_within_ticks():
    ticks = build_workload({"kind": "trace", "path": MOONCAKE, "duration_s": 600}, 0)
    spread = build_workload(
        {"kind": "trace", "path": MOONCAKE, "duration_s": 600, "spread_ticks_s": 3.0}, 0
    )
    assert np.mean(np.diff(ticks.arrival_time_s) == 0) > 0.8
    assert np.mean(np.diff(spread.arrival_time_s) == 0) < 0.01
    assert np.all(np.diff(spread.arrival_time_s) >= 0)
    assert abs(spread.num_requests - ticks.num_requests) < 30  # only the last tick can move out
    again = build_workload(
        {"kind": "trace", "path": MOONCAKE, "duration_s": 600, "spread_ticks_s": 3.0}, 0
    )
    assert np.array_equal(spread.arrival_time_s, again.arrival_time_s)


def test_csv_and_parquet_give_identical_workloads(tmp_path):
    rows = {
        "arrival_time_s": [0.0, 0.5, 0.5, 2.25],
        "prompt_tokens": [10, 20, 30, 40],
        "output_tokens": [1, 2, 3, 4],
        "extra": ["a", "b", "c", "d"],
    }
    table = pa.table(rows)
    pq.write_table(table, tmp_path / "t.parquet")
    lines = ["arrival_time_s,extra,prompt_tokens,output_tokens"]
    lines += [f"{t},{e},{p},{o}" for t, p, o, e in zip(*rows.values(), strict=True)]
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n")
    a = build_workload({"kind": "trace", "path": str(tmp_path / "t.parquet")}, 0)
    b = build_workload({"kind": "trace", "path": str(tmp_path / "t.csv")}, 0)
    for name in ("arrival_time_s", "prompt_tokens", "output_tokens"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
        assert getattr(a, name).dtype == getattr(b, name).dtype
    assert b.prompt_tokens.tolist() == [10, 20, 30, 40]


def _csv(tmp_path: Path, text: str) -> str:
    path = tmp_path / f"bad{len(list(tmp_path.glob('*.csv')))}.csv"
    path.write_text(text)
    return str(path)


def _bad_cases(tmp_path: Path) -> list[tuple[dict, str, str]]:
    header = "arrival_time_s,prompt_tokens,output_tokens\n"
    return [
        (trace(path="nope.parquet"), "workload.path", "file not found"),
        (trace(path=None), "workload.path", "required"),
        (
            trace(path=_csv(tmp_path, "arrival_time_s,prompt_tokens\n0,1\n")),
            "workload.path",
            "missing column(s) output_tokens; need arrival_time_s, prompt_tokens, output_tokens",
        ),
        (
            trace(path=_csv(tmp_path, header + "0,1,1\n1,0,1\n")),
            "workload.path",
            "row 2, column prompt_tokens: 0 must be >= 1",
        ),
        (
            trace(path=_csv(tmp_path, header + "0,1,1\n1,1,-3\n")),
            "workload.path",
            "row 2, column output_tokens: -3 must be >= 1",
        ),
        (
            trace(path=_csv(tmp_path, header + "0,1,1\n2,1,1\n1,1,1\n")),
            "workload.path",
            "row 3, column arrival_time_s: 1 is earlier than the row before (2)",
        ),
        (trace(path=_csv(tmp_path, header + "-1,1,1\n")), "workload.path", "-1 must be >= 0"),
        (
            trace(path=_csv(tmp_path, header + "0,1.5,1\n")),
            "workload.path",
            "row 1, column prompt_tokens: 1.5 is not a whole number of tokens",
        ),
        (trace(path=_csv(tmp_path, header)), "workload.path", "no rows"),
        (trace(rate_scale=0), "workload.rate_scale", "must be > 0"),
        (trace(rate_scale=-2.0), "workload.rate_scale", "must be > 0"),
        (trace(duration_s=0), "workload.duration_s", "must be > 0"),
        (trace(num_requests=0), "workload.num_requests", ">= 1"),
        (trace(start_s=-1), "workload.start_s", ">= 0"),
        (trace(start_s=1e6), "workload.start_s", "keeps 0 requests"),
        (trace(spread_ticks_s=0), "workload.spread_ticks_s", "must be > 0"),
    ]


def test_bad_trace_inputs_are_one_line_errors(tmp_path):
    for cfg, field, reason in _bad_cases(tmp_path):
        with pytest.raises(ConfigError) as err:
            build_workload(cfg, 0)
        message = str(err.value)
        assert message.startswith(field + "="), message
        assert reason in message and "\n" not in message, message


def test_time_counts_from_the_first_arrival(tmp_path):
    header = "arrival_time_s,prompt_tokens,output_tokens\n"
    path = _csv(tmp_path, header + "100,1,1\n100.5,2,1\n130,3,1\n")
    # "the first 30 seconds" of a trace whose clock starts at 100 s: 100 <= t < 130
    wl = build_workload(trace(path=path, duration_s=30.0), 0)
    assert wl.arrival_time_s.tolist() == [0.0, 0.5]
    assert wl.prompt_tokens.tolist() == [1, 2]


def test_empty_window_is_an_error(tmp_path):
    header = "arrival_time_s,prompt_tokens,output_tokens\n"
    path = _csv(tmp_path, header + "5,1,1\n6,1,1\n")
    with pytest.raises(
        ConfigError,
        match=r"^workload\.start_s=2\.0: keeps 0 requests "
        r"\(the trace spans 1\.0 s from its first arrival\)$",
    ):
        build_workload(trace(path=path, start_s=2.0), 0)


def test_missing_file_message(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        build_workload(trace(path="nope.parquet"), 0)
    assert str(err.value) == (
        f"workload.path='nope.parquet': file not found (relative to "
        f"{tmp_path}; a shipped file is named shipped:<path>)"
    )


# Small overrides so every shipped option builds fast; trace.yaml needs a path.
OVERRIDES = {
    "trace": {"path": AZURE_CONV, "num_requests": 50},
    "daily": {"duration_s": 600.0, "time_compression": 144.0},
    "azure_day": {"duration_s": 600.0, "time_compression": 144.0},
}


@pytest.mark.parametrize(
    "path", sorted((config_dir() / "workload").glob("*.yaml")), ids=lambda p: p.stem
)
def test_every_workload_config_builds(path):
    cfg = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    cfg.update(OVERRIDES.get(path.stem, {}))
    if cfg["kind"] != "trace" and cfg.get("num_requests") is not None:
        cfg["num_requests"] = min(cfg["num_requests"], 100)
    if cfg["kind"] == "sessions":
        cfg["num_sessions"] = min(cfg["num_sessions"], 20)
    w = build_workload(cfg, seed=0)
    assert w.num_requests >= 1
    # closed loops and conversations are paced by the fleet, not by arrival times
    assert (w.arrival_time_s is None) == (cfg["kind"] in ("closed_loop", "sessions"))
    assert (w.sessions is not None) == (cfg["kind"] == "sessions")
    assert w.prompt_tokens.min() >= 1 and w.output_tokens.min() >= 1


def test_default_workload_is_the_first_10_minutes_of_azure_conv():
    cfg = OmegaConf.to_container(OmegaConf.load(config_dir() / "workload" / "azure_conv.yaml"))
    assert build_workload(cfg, 0).num_requests == 2_867


@pytest.mark.parametrize(
    "path", sorted((config_dir() / "workload").glob("*.yaml")), ids=lambda p: p.stem
)
def test_every_workload_option_composes_with_hydra(path):
    hydra = pytest.importorskip("hydra")
    overrides = [f"+workload={path.stem}"]
    overrides += [f"workload.{k}={v}" for k, v in OVERRIDES.get(path.stem, {}).items()]
    with hydra.initialize_config_dir(config_dir=str(config_dir()), version_base=None):
        composed = hydra.compose(overrides=overrides)
    cfg = OmegaConf.to_container(composed.workload, resolve=True)
    if cfg["kind"] != "trace" and cfg.get("num_requests") is not None:
        cfg["num_requests"] = min(cfg["num_requests"], 100)
    assert build_workload(cfg, seed=0).num_requests >= 1
