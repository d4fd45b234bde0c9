"""The validation layer (``sim.config.validation``): strict types, whole numbers, finite floats,
null as "not given", and pydantic's errors said in one line naming the field and the value."""

import math

import pytest
from pydantic import Field

from sim.config.validation import Int, NonNegative, Positive, StrictModel, Tokens, validate
from sim.errors import ConfigError


class Section(StrictModel):
    section = "group"
    count: Tokens
    rate: Positive = 1.0
    wait_s: NonNegative = 0.0
    flag: bool = True
    limit: Int | None = None
    share: float = Field(0.5, ge=0, lt=1)


def error(data):
    with pytest.raises(ConfigError) as err:
        Section.from_config(data)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_valid_data_keeps_its_values_and_whole_floats_become_integers():
    checked = Section.from_config({"count": 3.0, "rate": 2, "flag": False, "limit": 1e3})
    assert (checked.count, checked.rate, checked.flag, checked.limit) == (3, 2.0, False, 1000)
    assert isinstance(checked.count, int) and isinstance(checked.rate, float)


def test_null_and_missing_both_take_the_default_and_a_required_field_says_so():
    for data in ({"count": 1}, {"count": 1, "rate": None, "wait_s": None, "flag": None}):
        checked = Section.from_config(data)
        assert (checked.rate, checked.wait_s, checked.flag, checked.limit) == (1.0, 0.0, True, None)
    assert error({"count": None}) == "group.count=None: required"
    assert error({}) == "group.count=None: required"


@pytest.mark.parametrize(
    "data, message",
    [
        ({"count": "2"}, "group.count='2': must be an integer"),
        ({"count": 2.5}, "group.count=2.5: must be an integer"),
        ({"count": True}, "group.count=True: must be an integer"),
        ({"count": 0}, "group.count=0: must be >= 1"),
        ({"count": 1e30}, "group.count=1e+30: must be <= 2147483647"),
        ({"count": 1, "rate": "0.1"}, "group.rate='0.1': must be a finite number"),
        ({"count": 1, "rate": math.inf}, "group.rate=inf: must be a finite number"),
        ({"count": 1, "rate": math.nan}, "group.rate=nan: must be a finite number"),
        ({"count": 1, "rate": 0}, "group.rate=0: must be > 0"),
        ({"count": 1, "wait_s": -1}, "group.wait_s=-1: must be >= 0"),
        ({"count": 1, "share": 1}, "group.share=1: must be < 1"),
        ({"count": 1, "flag": "maybe"}, "group.flag='maybe': must be true or false"),
        ({"count": 1, "flag": 1}, "group.flag=1: must be true or false"),
        ({"count": 1, "limit": "x"}, "group.limit='x': must be an integer"),
        (
            {"count": 1, "bogus": 2},
            "group.bogus=2: unknown key; known: count, flag, limit, rate, share, wait_s",
        ),
        (
            {"count": 1, "bogus": None},
            "group.bogus=None: unknown key; known: count, flag, limit, rate, share, wait_s",
        ),
    ],
)
def test_a_bad_value_is_one_line_naming_the_field_and_the_value(data, message):
    assert error(data) == message


def test_a_value_that_is_not_a_mapping_names_the_group():
    with pytest.raises(ConfigError, match=r"^group=3: must be a mapping$"):
        Section.from_config(3)


def test_validate_takes_a_type_as_well_as_a_model():
    assert validate(Tokens, 5, "x") == 5
    with pytest.raises(ConfigError, match=r"^x=0: must be >= 1$"):
        validate(Tokens, 0, "x")
