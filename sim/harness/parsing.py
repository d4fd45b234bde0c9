"""What every harness reader shares: reading a result file, and its keys checked one at a time.

A bad file is the user's input, so every problem is a ``ConfigError`` on the field
``bench_file`` whose value is the file's path and whose reason says what is wrong and where
(``'mean_ttft_ms' is missing``, ``line 3: not JSON (Expecting value)``): one line, never a
traceback. ``Keys`` wraps one decoded JSON/YAML object for a reader so that a missing key or a
value of the wrong type says so in those words.

Python's ``json`` reads the bare ``Infinity`` and ``NaN`` tokens that SGLang's
``bench_serving`` writes for an offline run's ``request_rate`` (they are not strict JSON).

A measured figure is checked where it is read, so that nothing downstream (a comparison's
relative error, a fit's log error) meets a value no benchmark can measure: a latency is finite,
above 0 and at most ``MAX_LATENCY_S``; a throughput finite and >= 0 (``measured_seconds``,
``measured_rate``); a run's TTFT and TPOT no larger than its E2E (``check_latencies``). A YAML
file is parsed with libyaml where PyYAML has it, and refused above ``MAX_YAML_BYTES``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from sim.errors import ConfigError
from sim.harness.results import ROLES, MeasuredRun
from sim.resources import yaml_loader

FIELD = "bench_file"
# The longest latency a benchmark file may hold: one day. A harness's client gives up on a
# request before that (vLLM's bench serve after 6 hours, SGLang's bench_serving after 20: their
# aiohttp timeouts), so a larger figure was never measured: it is a unit or a writing mistake
# (nanoseconds read as milliseconds, a timestamp where a duration belongs). The bound sits above
# every client's timeout on purpose, so that no real run, however overloaded, is refused.
MAX_LATENCY_S = 86_400.0
# The largest YAML result file read. YAML is slow to parse: a 4.6 MiB GuideLLM report took
# 10 s with libyaml and 33 s with PyYAML's pure-Python parser, where its JSON form took 0.08 s
# (2 busy cores, December 2026), so a 50 MB file would sit for minutes with no answer. GuideLLM
# writes the same report as JSON, which has no limit here. 8 MiB (300 times the shipped
# GuideLLM YAML sample) keeps the wait for the largest accepted file to seconds.
MAX_YAML_BYTES = 8 * 1024 * 1024
LINE = re.compile(r"line \d+")  # the place of a JSON line's object


def bad_file(path: Path | str, reason: str) -> ConfigError:
    """The one-line error for a result file that cannot be read as it should."""
    return ConfigError(FIELD, str(path), reason)


def request_times(path: Path, where: str, ttft_s: float, e2e_s: float) -> tuple[float, float]:
    """One request's TTFT and E2E latency (seconds), refused unless 0 <= TTFT <= E2E: its first
    token comes after it was sent and no later than its last, so a figure outside that is a
    clock or a unit mixed up, which would pass for a measurement in every comparison after."""
    if ttft_s < 0:
        raise bad_file(path, f"{where}: the time to first token is {ttft_s:g} s, below 0")
    if e2e_s < ttft_s:
        raise bad_file(
            path, f"{where}: the latency {e2e_s:g} s ends before the first token ({ttft_s:g} s)"
        )
    return ttft_s, e2e_s


def read_text(path: Path) -> str:
    if not path.exists():
        raise bad_file(path, "file not found")
    if not path.is_file():
        raise bad_file(path, "is a folder, not a result file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise bad_file(path, "not a text file (a harness writes JSON, JSONL or YAML)") from None
    except OSError as err:
        raise bad_file(path, f"cannot be read ({err.strerror or err})") from None
    if not text.strip():
        raise bad_file(path, "is empty")
    return text


def decode(path: Path, text: str) -> Any:
    """The file as one JSON document, else as JSON lines (a list of objects), else as YAML
    (whose documents that are plain text are not results); ConfigError if none fits."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as whole:
        first_error = whole
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].lstrip().startswith("{"):
        rows = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise bad_file(path, f"line {number}: not JSON ({err.msg})") from None
        return rows
    size = len(text.encode("utf-8"))
    if size > MAX_YAML_BYTES:
        raise bad_file(
            path,
            f"not JSON (JSON: {first_error.msg} at line {first_error.lineno}), and too large "
            f"to read as YAML ({size / 2**20:.3g} MiB, the limit is "
            f"{MAX_YAML_BYTES / 2**20:.3g} MiB): give the JSON form of the result",
        )
    try:
        doc = yaml.load(text, Loader=yaml_loader())  # a safe loader, in C where available
    except yaml.YAMLError:
        doc = None
    if isinstance(doc, (dict, list)):
        return doc
    raise bad_file(
        path,
        f"not JSON, JSON lines or YAML (JSON: {first_error.msg} at line {first_error.lineno})",
    )


class Keys:
    """One object of a result file, read key by key with the file and ``where`` (the object's
    place in the file, e.g. ``line 2`` or ``benchmarks[0].metrics``) named in every error."""

    def __init__(self, path: Path, obj: object, where: str = "") -> None:
        if not isinstance(obj, dict):
            place = f"{where}: " if where else ""
            raise bad_file(path, f"{place}expected an object of keys, got {type(obj).__name__}")
        self.path = path
        self.obj: dict[str, Any] = obj
        self.where = where

    def _name(self, key: str) -> str:
        if not self.where:
            return key
        # a JSON line's object is "line 3: key", a nested object's "benchmarks[0].key"
        separator = ": " if LINE.fullmatch(self.where) else "."
        return f"{self.where}{separator}{key}"

    def has(self, key: str) -> bool:
        return self.obj.get(key) is not None

    def _present(self, key: str) -> str:
        """``key``, or ConfigError when the object lacks it."""
        if key not in self.obj:
            raise bad_file(self.path, f"{self._name(key)!r} is missing")
        return key

    def optional_number(self, key: str) -> float | None:
        """A number (an int, a float, ``inf``, or a numeric string: the IOG vLLM file writes
        ``gpu_count`` as text); None where the key is absent or null."""
        value = self.obj.get(key)
        if value is None:
            return None
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            raise bad_file(self.path, f"{self._name(key)}={value!r} is not a number")
        return float(value)

    def optional_finite(self, key: str, minimum: float, *, strict: bool = False) -> float | None:
        """``optional_number``, refused unless finite and >= ``minimum`` (> with ``strict``)."""
        value = self.optional_number(key)
        if value is not None and not (
            math.isfinite(value) and (value > minimum if strict else value >= minimum)
        ):
            bound = f"{'>' if strict else '>='} {minimum:g}"
            raise bad_file(
                self.path, f"{self._name(key)}={value!r} must be a finite number {bound}"
            )
        return value

    def measured_seconds(self, key: str, unit_s: float, *, spread: bool = False) -> float | None:
        """A measured latency (or, with ``spread``, a standard deviation, which may be 0) in
        seconds, the file's value times ``unit_s``: finite, above 0 and at most
        ``MAX_LATENCY_S`` (module docstring); None where the key is absent or null."""
        value = self.optional_number(key)
        if value is None:
            return None
        name = f"{self._name(key)}={value!r}"
        if not math.isfinite(value) or value < 0 or (value == 0 and not spread):
            what = "finite and >= 0" if spread else "finite and above 0"
            raise bad_file(self.path, f"{name} is not a measured time: it must be {what}")
        seconds = value * unit_s
        if seconds > MAX_LATENCY_S:
            raise bad_file(
                self.path,
                f"{name} is {seconds / 3600:,.4g} hours, more than any benchmark measures "
                f"(at most {MAX_LATENCY_S / 3600:g} hours): a unit or a writing mistake?",
            )
        return seconds

    def measured_rate(self, key: str) -> float | None:
        """A measured throughput (per second): finite and >= 0; None where absent or null."""
        return self.optional_finite(key, 0.0)

    def _required(self, key: str, read: Callable[[str], float | None]) -> float:
        """``read(key)`` of a key that must be there and not be null."""
        value = read(self._present(key))
        if value is None:
            raise bad_file(self.path, f"{self._name(key)} is null, not a number")
        return value

    def number(self, key: str) -> float:
        return self._required(key, self.optional_number)

    def seconds(self, key: str, unit_s: float) -> float:
        """``measured_seconds`` of a key that must be there."""
        return self._required(key, lambda present: self.measured_seconds(present, unit_s))

    def rate(self, key: str) -> float:
        """``measured_rate`` of a key that must be there."""
        return self._required(key, self.measured_rate)

    def optional_duration(self, key: str) -> float | None:
        """A run's duration in seconds: finite and above 0; None where absent or null."""
        return self.optional_finite(key, 0.0, strict=True)

    def duration(self, key: str) -> float:
        """``optional_duration`` of a key that must be there."""
        return self._required(key, self.optional_duration)

    def request_rate(self, key: str) -> float:
        """``optional_request_rate`` of a key that must be there."""
        return self._required(key, self.optional_request_rate)

    def optional_request_rate(self, key: str) -> float | None:
        """The rate a client sent at, per second: above 0, ``inf`` for all at once."""
        value = self.optional_number(key)
        if value is not None and not value > 0:
            raise bad_file(
                self.path, f"{self._name(key)}={value!r} must be above 0 (inf: all at once)"
            )
        return value

    def optional_count(self, key: str) -> int | None:
        """A whole number >= 0 (written as an int or a float such as ``89.0``)."""
        value = self.optional_number(key)
        if value is None:
            return None
        if value < 0 or not value.is_integer():
            raise bad_file(self.path, f"{self._name(key)}={value!r} is not a count")
        return int(value)

    def count(self, key: str) -> int:
        value = self.optional_count(self._present(key))
        if value is None:
            raise bad_file(self.path, f"{self._name(key)} is null, not a count")
        return value

    def optional_text(self, key: str) -> str | None:
        value = self.obj.get(key)
        if value is not None and not isinstance(value, str):
            raise bad_file(self.path, f"{self._name(key)}={value!r} is not text")
        return value

    def text(self, key: str) -> str:
        value = self.optional_text(self._present(key))
        if value is None:
            raise bad_file(self.path, f"{self._name(key)} is null, not text")
        return value

    def optional_child(self, key: str) -> Keys | None:
        """The object under ``key``; None where the key is absent or null."""
        value = self.obj.get(key)
        return None if value is None else Keys(self.path, value, self._name(key))

    def child(self, key: str) -> Keys:
        return Keys(self.path, self.obj[self._present(key)], self._name(key))

    def items(self, key: str) -> list[Any]:
        value = self.obj[self._present(key)]
        if not isinstance(value, list):
            raise bad_file(self.path, f"{self._name(key)} is not a list")
        return value

    def numbers(self, key: str) -> list[float]:
        """A list of numbers (a per-request array)."""
        values = self.items(key)
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            raise bad_file(self.path, f"{self._name(key)} holds something that is not a number")
        return [float(v) for v in values]


def check_latencies(path: Path, run: MeasuredRun) -> None:
    """ConfigError unless each of ``run``'s TTFT and TPOT/ITL figures is at most its E2E
    figure of the same kind (mean, or the same percentile).

    Every request's TTFT and its per-token gaps lie inside its E2E latency, so the TTFT's
    mean and each percentile are at most the E2E's (the bound holds request by request). A
    per-token figure averages over the requests with two or more tokens only, so it could in
    principle pass a mean E2E dragged down by many one-token requests; a run scored on TPOT is
    not such a run, and a TPOT above the E2E is the typical mark of swapped or mis-scaled keys.
    """
    e2e = run.latency.get("e2e")
    if e2e is None:
        return
    for role in ROLES:
        stat = run.latency.get(role)
        if role == "e2e" or stat is None:
            continue
        pairs = [("mean", stat.mean_s, e2e.mean_s)]
        if role == "ttft":  # a percentile of TPOT is over fewer requests than E2E's
            pairs += [
                (f"p{q:g}", value, e2e.percentiles_s.get(q))
                for q, value in stat.percentiles_s.items()
            ]
        for kind, value, bound in pairs:
            if value is not None and bound is not None and value > bound * (1 + 1e-9):
                raise bad_file(
                    path,
                    f"{run.label}: {kind} {stat.name} ({value * 1e3:,.4g} ms) is larger than "
                    f"{kind} {e2e.name} ({bound * 1e3:,.4g} ms), the whole request's time: "
                    "the file's keys are swapped or mis-scaled",
                )
