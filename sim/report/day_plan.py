"""A day plan's ``day_plan.json``, read tolerantly.

A day plan sizes a fleet for traffic that changes over the day and answers three ways, each
simulated over the whole day into its own run folder (``answers/NAME/``, with
``scaling.parquet``):

- ``peak``: one fleet sized for the day's peak hour, all day;
- ``seasonal``: a fleet per period of the day (``periods``), switched at the period bounds;
- ``autoscaled``: replicas added and released as the load moves.

The file's shape::

    {"periods": [{"start_hour", "end_hour", "rate_rps", "candidate": [overrides],
                  "replicas", "usd_per_hour"}, ...],
     "answers": {"peak" | "seasonal" | "autoscaled":
                 {"run": "answers/peak", "usd_per_day", "gpu_hours", "slo_attainment",
                  "hours_plan_slo_met", "hours_with_requests",
                  "hourly": [{"hour", "requests", "attainment", "low", "high",
                              "plan_slo": {constraint: value}, "plan_slo_met"}, ...]}},
     "saving_vs_peak": {"seasonal": fraction, "autoscaled": fraction},
     "plan_slo": ["ttft_s.p99 <= 1", ...],
     "command": "..."}

and, where the planner writes them: each answer's ``slo_attainment_low``/``_high`` (the day's
Wilson interval) and ``replicas_max``; the day's ``hourly_rates_rps`` (24 rates, by hour of
day), the ``start_hour`` and ``time_compression`` of its runs (simulated second s is hour of
day ``start_hour + s x time_compression / 3600``), and a ``note``.

Two SLOs, not to be confused: ``slo_attainment`` (over the day and per hour, ``attainment``)
is the share of requests that met every per-request bound of the runs' config (``slo.*``);
``plan_slo`` are the plan's statistics (``ttft_s.p99 <= 1``), evaluated over each hour's
completed requests (``plan_slo``, ``plan_slo_met``: null for an hour without requests), and
``hours_plan_slo_met`` counts the ``hours_with_requests`` where all of them held.

The writer is younger than this reader, so every field is optional: a missing or mistyped
value is None (or an empty list; ``start_hour`` 0 and ``time_compression`` 1), an unknown key
is ignored, and only a file that is not a JSON object is refused. A period may wrap past
midnight (``start_hour`` 22, ``end_hour`` 6).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.errors import ConfigError

DAY_PLAN_FILE = "day_plan.json"
ANSWERS = ("peak", "seasonal", "autoscaled")  # the order they are shown in
SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class Period:
    start_hour: float | None
    end_hour: float | None
    rate_rps: float | None
    candidate: list[str]
    replicas: int | None
    usd_per_hour: float | None

    @property
    def hours(self) -> float | None:
        """Its length in hours (a period past midnight wraps)."""
        if self.start_hour is None or self.end_hour is None:
            return None
        return (self.end_hour - self.start_hour) % 24 or 24.0

    @property
    def label(self) -> str:
        """``22:00-06:00``."""

        def clock(hour: float | None) -> str:
            return "?" if hour is None else f"{int(hour):02d}:{round((hour % 1) * 60):02d}"

        return f"{clock(self.start_hour)}-{clock(self.end_hour)}"


@dataclass(frozen=True)
class HourlyAttainment:
    hour: float | None
    requests: int | None
    attainment: float | None
    low: float | None
    high: float | None
    plan_slo: dict[str, float | None] = field(default_factory=dict)  # constraint -> value
    plan_slo_met: bool | None = None  # None: not recorded, or an hour without requests


@dataclass(frozen=True)
class DayAnswer:
    name: str
    run: str | None  # the run folder, relative to the day plan's folder
    usd_per_day: float | None
    gpu_hours: float | None
    slo_attainment: float | None
    hourly: list[HourlyAttainment] = field(default_factory=list)
    slo_attainment_low: float | None = None
    slo_attainment_high: float | None = None
    replicas_max: int | None = None
    hours_plan_slo_met: int | None = None
    hours_with_requests: int | None = None


@dataclass(frozen=True)
class DayPlan:
    periods: list[Period]
    answers: dict[str, DayAnswer]  # in ANSWERS order, then any other the file holds
    saving_vs_peak: dict[str, float]
    command: str | None
    hourly_rates_rps: list[float] = field(default_factory=list)
    start_hour: float = 0.0
    time_compression: float = 1.0
    note: str | None = None
    plan_slo: list[str] = field(default_factory=list)  # the plan's constraints, as text

    def hours_since_start(self, time_s: float) -> float:
        """The hours of the day a run's simulated second stands for, from the run's start."""
        return time_s * self.time_compression / SECONDS_PER_HOUR

    def hour_of_day(self, time_s: float) -> float:
        """The hour of the day a run's simulated second stands for (not wrapped at 24)."""
        return self.start_hour + self.hours_since_start(time_s)

    def since_start(self, hour_of_day: float) -> float:
        """Hours from the run's start to the next time the clock shows ``hour_of_day``
        (0 to 24)."""
        return (hour_of_day - self.start_hour) % 24


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _count(value: Any) -> int | None:
    number = _number(value)
    return None if number is None or number != int(number) else int(number)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _objects(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _texts(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _values(value: Any) -> dict[str, float | None]:
    """``{constraint text: value}`` (a value that is not a number: None)."""
    return {str(k): _number(v) for k, v in _mapping(value).items()}


def _overrides(value: Any) -> list[str]:
    """A candidate's overrides: a list of ``key=value`` (a string: its words)."""
    if isinstance(value, str):
        return value.split()
    return [str(v) for v in value] if isinstance(value, list) else []


def parse_day_plan(data: Any, where: str = DAY_PLAN_FILE) -> DayPlan:
    """The day plan in ``data`` (``day_plan.json``'s object); ConfigError naming ``where``
    only when it is not an object."""
    if not isinstance(data, dict):
        raise ConfigError("PATH", where, "day_plan.json must hold a JSON object")
    periods = [
        Period(
            _number(p.get("start_hour")),
            _number(p.get("end_hour")),
            _number(p.get("rate_rps")),
            _overrides(p.get("candidate")),
            _count(p.get("replicas")),
            _number(p.get("usd_per_hour")),
        )
        for p in _objects(data.get("periods"))
    ]
    given: dict[str, Any] = _mapping(data.get("answers"))
    names = [n for n in ANSWERS if n in given] + [n for n in given if n not in ANSWERS]
    answers = {}
    for name in names:
        a = _mapping(given[name])
        hourly = [
            HourlyAttainment(
                _number(h.get("hour")),
                _count(h.get("requests")),
                _number(h.get("attainment")),
                _number(h.get("low")),
                _number(h.get("high")),
                _values(h.get("plan_slo")),
                _flag(h.get("plan_slo_met")),
            )
            for h in _objects(a.get("hourly"))
        ]
        answers[name] = DayAnswer(
            str(name),
            _text(a.get("run")),
            _number(a.get("usd_per_day")),
            _number(a.get("gpu_hours")),
            _number(a.get("slo_attainment")),
            hourly,
            _number(a.get("slo_attainment_low")),
            _number(a.get("slo_attainment_high")),
            _count(a.get("replicas_max")),
            _count(a.get("hours_plan_slo_met")),
            _count(a.get("hours_with_requests")),
        )
    savings = {str(k): _number(v) for k, v in _mapping(data.get("saving_vs_peak")).items()}
    saving_vs_peak = {k: v for k, v in savings.items() if v is not None}
    rates = data.get("hourly_rates_rps")
    compression = _number(data.get("time_compression"))
    return DayPlan(
        periods,
        answers,
        saving_vs_peak,
        _text(data.get("command")),
        [r for r in (_number(v) for v in rates) if r is not None]
        if isinstance(rates, list)
        else [],
        _number(data.get("start_hour")) or 0.0,
        compression if compression and compression > 0 else 1.0,
        _text(data.get("note")),
        _texts(data.get("plan_slo")),
    )


def read_day_plan(folder: Path) -> DayPlan:
    """``folder/day_plan.json``; ConfigError naming it when it is not JSON."""
    path = folder / DAY_PLAN_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        reason = " ".join(str(err).split())
        raise ConfigError("PATH", str(folder), f"cannot read {DAY_PLAN_FILE}: {reason}") from None
    return parse_day_plan(data, str(path))
