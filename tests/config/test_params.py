"""Reading one config value (``sim.config.params``): its type and range checked, the error naming
the dotted field; a missing key and an explicit null both mean "not given"."""

import math

import pytest

from sim.config import params
from sim.errors import ConfigError
from sim.run import simulate
from tests.support import compose


def test_null_and_missing_both_take_the_default():
    for cfg in ({}, {"think_time_s": None}):
        assert params.number(cfg, "think_time_s", default=0.0, prefix="workload") == 0.0
        assert params.integer(cfg, "seed", default=0, prefix="") == 0
        assert params.number(cfg, "horizon_s", prefix="sim") is None
    with pytest.raises(ConfigError, match=r"^workload\.qps=None: required$"):
        params.number({"qps": None}, "qps", required=True, prefix="workload")


def test_null_for_a_field_with_a_default_runs_as_the_default():
    base = [
        "workload=closed_loop",
        "workload.num_requests=20",
        "workload.concurrency=2",
        "workload.prompt_tokens=10",
        "workload.output_tokens=5",
        "sim.progress=false",
    ]
    plain = simulate(compose(*base)).summary
    for override in ("seed=null", "workload.think_time_s=null", "frontend.token_s=null"):
        assert simulate(compose(*base, override)).summary == plain, override


@pytest.mark.parametrize(
    "value, reason",
    [
        ("2", "must be a finite number"),
        (True, "must be a finite number"),
        (math.nan, "must be a finite number"),
        (math.inf, "must be a finite number"),
        (-1.0, "must be > 0"),
    ],
)
def test_a_number_is_finite_numeric_and_in_range(value, reason):
    with pytest.raises(ConfigError) as err:
        params.number({"qps": value}, "qps", gt=0, prefix="workload")
    assert str(err.value) == f"workload.qps={value!r}: {reason}"


def test_an_integer_is_whole():
    assert params.integer({"n": 4.0}, "n", prefix="x") == 4
    with pytest.raises(ConfigError, match=r"^x\.n=2\.5: must be an integer$"):
        params.integer({"n": 2.5}, "n", prefix="x")
    with pytest.raises(ConfigError, match=r"^x\.n=0: must be >= 1$"):
        params.integer({"n": 0}, "n", ge=1, prefix="x")


def test_a_choice_lists_the_options():
    with pytest.raises(ConfigError, match=r"^workload\.kind='nope': unknown; choose one of a, b$"):
        params.choice({"kind": "nope"}, "kind", ["b", "a"], prefix="workload")
