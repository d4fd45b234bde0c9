"""What every harness reader shares: reading a result file, and its keys checked one at a time.

A bad file is the user's input, so every problem is a ``ConfigError`` on the field
``bench_file`` whose value is the file's path and whose reason says what is wrong and where
(``'mean_ttft_ms' is missing``, ``line 3: not JSON (Expecting value)``): one line, never a
traceback. ``Keys`` wraps one decoded JSON/YAML object for a reader so that a missing key or a
value of the wrong type says so in those words.

Python's ``json`` reads the bare ``Infinity`` and ``NaN`` tokens that SGLang's
``bench_serving`` writes for an offline run's ``request_rate`` (they are not strict JSON).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import yaml

from sim.errors import ConfigError

FIELD = "bench_file"


def bad_file(path: Path | str, reason: str) -> ConfigError:
    """The one-line error for a result file that cannot be read as it should."""
    return ConfigError(FIELD, str(path), reason)


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
    try:
        doc = yaml.safe_load(text)
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
        return f"{self.where}.{key}" if self.where else key

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

    def number(self, key: str) -> float:
        value = self.optional_number(self._present(key))
        if value is None:
            raise bad_file(self.path, f"{self._name(key)} is null, not a number")
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
