"""Length distributions: analytic means, bounds, presets, validation."""

import numpy as np
import pytest

from sim.errors import ConfigError
from sim.rng import stream
from sim.workload import build_workload
from sim.workload.lengths import (
    PATTERNS,
    EmpiricalLength,
    LogNormalLength,
    UniformLength,
    build_length,
    build_lengths,
)
from sim.workload.traces import load_trace

AZURE_CONV = "data/traces/azure_llm_2023_conv.parquet"
N = 50_000


def _rng(seed: int = 0) -> np.random.Generator:
    return stream(seed, "workload.prompt_tokens")


def test_int_means_fixed_length():
    dist = build_length(512, "workload.prompt_tokens")
    assert dist.mean == 512.0
    assert build_length({"dist": "fixed", "value": 7}, "x").sample(_rng(), 3).tolist() == [7, 7, 7]


def test_uniform_is_inclusive_with_the_right_mean():
    dist = build_length({"dist": "uniform", "low": 10, "high": 20}, "workload.prompt_tokens")
    assert isinstance(dist, UniformLength)
    draws = dist.sample(_rng(), N)
    assert draws.min() == 10 and draws.max() == 20 and draws.dtype == np.int64
    assert draws.mean() == pytest.approx(dist.mean, rel=0.01)


def test_lognormal_matches_its_unclipped_mean_and_median():
    dist = build_length({"dist": "lognormal", "median": 1000, "sigma": 0.5}, "x")
    assert dist.mean == pytest.approx(1000 * np.exp(0.125))
    draws = dist.sample(_rng(), N)
    assert draws.mean() == pytest.approx(dist.mean, rel=0.02)
    assert np.median(draws) == pytest.approx(1000, rel=0.02)


def test_lognormal_is_clipped_to_min_and_max():
    dist = LogNormalLength(median=100, sigma=2.0, min_tokens=50, max_tokens=200)
    draws = dist.sample(_rng(), N)
    assert draws.min() == 50 and draws.max() == 200
    # Heavy clipping: the sample mean is far from the unclipped analytic mean.
    assert draws.mean() < dist.mean / 2


def test_empirical_resamples_a_trace_column():
    dist = build_length({"dist": "empirical", "path": AZURE_CONV}, "workload.output_tokens")
    assert isinstance(dist, EmpiricalLength)
    observed = load_trace(AZURE_CONV).output_tokens
    assert dist.mean == pytest.approx(observed.mean())
    draws = dist.sample(_rng(), N)
    assert set(np.unique(draws)) <= set(np.unique(observed))
    assert draws.mean() == pytest.approx(observed.mean(), rel=0.02)


def test_empirical_column_can_be_named():
    dist = build_length(
        {"dist": "empirical", "path": AZURE_CONV, "column": "prompt_tokens"},
        "workload.output_tokens",
    )
    assert dist.mean == pytest.approx(load_trace(AZURE_CONV).prompt_tokens.mean())


def test_empirical_in_order_replays_the_rows_and_cycles_past_the_last(tmp_path):
    path = tmp_path / "lengths.csv"
    path.write_text("prompt_tokens,output_tokens\n5,1\n7,2\n3,9\n")
    dist = build_length(
        {"dist": "empirical", "path": str(path), "in_order": True}, "workload.prompt_tokens"
    )
    # the generator is not drawn from: any two give the file's order
    assert dist.sample(_rng(), 7).tolist() == [5, 7, 3, 5, 7, 3, 5]
    assert dist.sample(_rng(9), 2).tolist() == [5, 7]


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_patterns_sit_on_their_side_of_the_1024_256_split(name):
    prompt, output = build_lengths({"pattern": name, "prompt_tokens": 3, "output_tokens": 3})
    p, o = prompt.sample(_rng(), N), output.sample(_rng(1), N)
    long_in, long_out = name.startswith("long_in"), name.endswith("long_out")
    assert np.all(p > 1024) if long_in else np.all(p <= 1024)
    assert np.all(o > 256) if long_out else np.all(o <= 256)


def test_pattern_overrides_the_length_fields():
    cfg = {
        "kind": "poisson",
        "qps": 1.0,
        "num_requests": 2000,
        "prompt_tokens": 3,
        "output_tokens": 3,
        "pattern": "short_in_long_out",
    }
    w = build_workload(cfg, 0)
    assert np.median(w.prompt_tokens) == pytest.approx(256, rel=0.1)
    assert np.median(w.output_tokens) == pytest.approx(1024, rel=0.1)


def test_prompt_and_output_streams_are_independent():
    base = {
        "kind": "poisson",
        "qps": 1.0,
        "num_requests": 100,
        "prompt_tokens": {"dist": "uniform", "low": 1, "high": 1000},
        "output_tokens": 5,
    }
    changed = {**base, "output_tokens": {"dist": "lognormal", "median": 9, "sigma": 1}}
    assert np.array_equal(
        build_workload(base, 3).prompt_tokens, build_workload(changed, 3).prompt_tokens
    )


BAD = [
    (0, "workload.prompt_tokens"),
    (-5, "workload.prompt_tokens"),
    (2.5, "workload.prompt_tokens"),
    ("long", "workload.prompt_tokens"),
    (None, "workload.prompt_tokens"),
    ({"dist": "zipf"}, "workload.prompt_tokens.dist"),
    ({"dist": "fixed", "value": 0}, "workload.prompt_tokens.value"),
    ({"dist": "uniform", "low": 0, "high": 4}, "workload.prompt_tokens.low"),
    ({"dist": "uniform", "low": 5, "high": 4}, "workload.prompt_tokens.high"),
    ({"dist": "lognormal", "median": -1, "sigma": 1}, "workload.prompt_tokens.median"),
    ({"dist": "lognormal", "median": 10, "sigma": -1}, "workload.prompt_tokens.sigma"),
    ({"dist": "lognormal", "median": 10, "sigma": 1, "min": 0}, "workload.prompt_tokens.min"),
    (
        {"dist": "lognormal", "median": 10, "sigma": 1, "min": 9, "max": 8},
        "workload.prompt_tokens.max",
    ),
    ({"dist": "empirical", "path": "no/such.parquet"}, "workload.prompt_tokens.path"),
    ({"dist": "empirical", "path": AZURE_CONV, "column": "nope"}, "workload.prompt_tokens.path"),
]


@pytest.mark.parametrize("spec,field", BAD, ids=[repr(s) for s, _ in BAD])
def test_bad_length_is_one_line_error_naming_the_field(spec, field):
    with pytest.raises(ConfigError) as err:
        build_length(spec, "workload.prompt_tokens")
    message = str(err.value)
    assert message.startswith(field + "=") and "\n" not in message


def test_unknown_pattern_lists_choices():
    with pytest.raises(ConfigError) as err:
        build_lengths({"pattern": "medium", "prompt_tokens": 1, "output_tokens": 1})
    message = str(err.value)
    assert message.startswith("workload.pattern='medium'")
    assert all(name in message for name in PATTERNS)


def test_unknown_dist_lists_choices():
    with pytest.raises(ConfigError) as err:
        build_length({"dist": "zipf"}, "workload.output_tokens")
    message = str(err.value)
    assert message.startswith("workload.output_tokens.dist='zipf': unknown; choose one of ")
    for dist in ("empirical", "fixed", "lognormal", "uniform"):
        assert dist in message
