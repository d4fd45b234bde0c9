"""SLO constraints on a run's summary: ``METRIC OP BOUND``, e.g. ``ttft_s.p99 <= 2``.

``METRIC`` is a dotted path into ``summary.json`` (``ttft_s.p99``, ``tpot_s.mean``,
``e2e_s.p95``, ``throughput.output_tokens_per_s``) or ``slo_attainment``: the share of all
requests (rejected and unfinished included) that met every per-request bound in ``slo.*``
(``goodput x duration / requests``), for goodput SLOs such as ``slo_attainment >= 0.99``.
``OP`` is ``<=`` or ``>=``. A statistic a run does not have (no request completed) misses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sim.errors import ConfigError

_FORM = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(<=|>=)\s*([-+0-9.eE]+)\s*$")


@dataclass(frozen=True)
class Constraint:
    metric: str
    op: str  # "<=" or ">="
    bound: float

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.bound:g}"

    def value(self, summary: dict[str, Any]) -> float | None:
        """The statistic in ``summary``; None when the run has none."""
        if self.metric == "slo_attainment":
            good, span, n = (
                summary.get("goodput_requests_per_s"),
                summary.get("duration_s"),
                summary.get("num_requests"),
            )
            return None if good is None or not span or not n else good * span / n
        node: Any = summary
        for part in self.metric.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return float(node) if isinstance(node, (int, float)) and node is not None else None

    def met_by(self, value: float | None) -> bool:
        if value is None:
            return False
        return value <= self.bound if self.op == "<=" else value >= self.bound

    def slack(self, value: float) -> float:
        """How far ``value`` is on the good side (negative: the bad side)."""
        return self.bound - value if self.op == "<=" else value - self.bound


def parse(text: object, summary_example: dict[str, Any] | None = None) -> Constraint:
    """``Constraint`` of ``text``; ConfigError on ``plan.slo`` naming it. With a summary at
    hand, the metric must be one of its numbers."""
    found = _FORM.match(text) if isinstance(text, str) else None
    if found is None:
        raise ConfigError(
            "plan.slo",
            text,
            "write each SLO as METRIC <= BOUND or METRIC >= BOUND, e.g. 'ttft_s.p99 <= 2'",
        )
    try:
        bound = float(found[3])
    except ValueError:
        raise ConfigError("plan.slo", text, f"bound {found[3]!r} is not a number") from None
    constraint = Constraint(found[1], found[2], bound)
    if summary_example is not None and constraint.metric != "slo_attainment":
        node: Any = summary_example
        for part in constraint.metric.split("."):
            node = node.get(part, _MISSING) if isinstance(node, dict) else _MISSING
        if node is _MISSING or isinstance(node, (dict, str, bool)):
            raise ConfigError(
                "plan.slo",
                text,
                f"{constraint.metric} is not a number of summary.json (e.g. ttft_s.p99, "
                "tpot_s.mean, e2e_s.p95, slo_attainment)",
            )
    return constraint


_MISSING = object()
