"""The shapes of the files ``fleetcast report`` reads (``summary.json``, ``plan.json``,
``plan_request.json``), and the check that refuses, in one line naming the file and the key, a
file whose values are not what the report draws from (``sim.report.inputs`` reads the files)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.errors import ConfigError
from sim.output.run_files import SUMMARY_COUNTS


def refuse(path: Path | str, reason: str) -> ConfigError:
    """The one-line error of a report's PATH that cannot be read as it should."""
    return ConfigError("PATH", str(path), reason)


# -- the shape of the files the report reads --------------------------------------------------
#
# A shape is a check (a function from a value to "it is fine"), a mapping of key -> shape (the
# value must be a mapping; each key, when present and not null, must have its shape), or a
# one-item list [shape] (a list whose every item has it). Null is allowed wherever a key is:
# the simulator writes null for a statistic it has no sample for.


@dataclass(frozen=True)
class Kind:
    """A leaf of a shape: ``what`` names it in a refusal (``a number``)."""

    what: str
    test: Callable[[object], bool]


NUMBER = Kind("a number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool))
COUNT = Kind(
    "a whole number >= 0", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0
)
TEXT = Kind("text", lambda v: isinstance(v, str))
FLAG = Kind("true or false", lambda v: isinstance(v, bool))
MAPPING = Kind("a mapping", lambda v: isinstance(v, dict))
LIST = Kind("a list", lambda v: isinstance(v, list))

STATS = {stat: NUMBER for stat in ("mean", "p50", "p90", "p95", "p99")}
# summary.json as the report reads it (sim.output.results writes it)
SUMMARY_SHAPE: dict[str, Any] = {
    **{key: STATS for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s", "queueing_delay_s")},
    "throughput": {
        "requests_per_s": NUMBER,
        "output_tokens_per_s": NUMBER,
        "total_tokens_per_s": NUMBER,
    },
    "goodput_requests_per_s": NUMBER,
    "slo": {"ttft_s": NUMBER, "tpot_s": NUMBER, "e2e_s": NUMBER},
    **dict.fromkeys(SUMMARY_COUNTS, COUNT),
    "duration_s": NUMBER,
    "gpu_busy_fraction": NUMBER,
    "kv_utilization": {"mean": NUMBER, "max": NUMBER},
    "kv_capacity_tokens_per_model": [COUNT],
    "cost": {
        "usd_per_gpu_hour": NUMBER,
        "tier": TEXT,
        "price_source": TEXT,
        "usd_per_hour": NUMBER,
        "usd_per_hour_with_energy": NUMBER,
        "usd_per_million_output_tokens": NUMBER,
        "usd_per_million_input_tokens": NUMBER,
        "usd_per_thousand_good_requests": NUMBER,
        "gpu_hours_per_day": NUMBER,
        "energy": MAPPING,
    },
    "rejected_by_reason": MAPPING,
    "stability": {"verdict": TEXT, "reason": TEXT},
    "autoscale": MAPPING,
    "disaggregation": MAPPING,
    "prefix_cache": MAPPING,
    "failed": COUNT,
    "failed_by_reason": MAPPING,
    "faults": {
        "availability": NUMBER,
        "replica_hours_planned": NUMBER,
        "replica_hours_down": NUMBER,
        **dict.fromkeys(("failures", "maintenance", "spot_reclaims"), COUNT),
        **dict.fromkeys(("requests_retried", "retries", "failed"), COUNT),
        "degraded_s": NUMBER,
        "degraded": MAPPING,
        "failed_by_reason": MAPPING,
    },
}
# the keys every summary.json has (the output contract, docs/reference: the summary's keys)
SUMMARY_KEYS = (
    "ttft_s",
    "tpot_s",
    "itl_s",
    "e2e_s",
    "throughput",
    "goodput_requests_per_s",
    "completed",
    "rejected",
    "unfinished",
    "num_gpus",
    "kv_capacity_tokens",
    "cost",
)
# the config.yaml groups the report reads, each a mapping (configs/: one folder per group)
CONFIG_SECTIONS = (
    "model",
    "hardware",
    "precision",
    "memory",
    "kv",
    "fleet",
    "scheduler",
    "router",
    "step_time",
    "workload",
    "slo",
    "sim",
    "frontend",
    "placement",
    "cost",
    "output",
    "autoscale",
    "spec_decode",
)
CANDIDATE_SHAPE = {
    "candidate": TEXT,
    "overrides": [TEXT],
    "feasible": FLAG,
    "replicas": COUNT,
    "reason": TEXT,
    "evaluated": [MAPPING],
    "usd_per_hour": NUMBER,
    "usd_per_million_output_tokens": NUMBER,
    "replications": COUNT,
    "miss_probability": NUMBER,
    "verdicts": [TEXT],
    "whatifs": MAPPING,
    "headroom": MAPPING,
    "slo_headroom": {
        "outcome": TEXT,
        "meets_up_to_rate_x": NUMBER,
        "misses_at_rate_x": NUMBER,
        "evaluated": MAPPING,
    },
    "load_replicas": COUNT,  # with faults: the count without them (N)
    "spare_replicas": COUNT,  # and the spare the faults ask for (k)
    "faults": {"gpu_mtbf_h": NUMBER, "repair_h": NUMBER, "repair": TEXT, "on_failure": TEXT},
    # plan.faults.availability: k from the rates, and the cheapest tier mix of N + k
    "spares": {
        "availability": NUMBER,
        "replica_up_probability": MAPPING,
        "gpus_per_replica": COUNT,
        "spares": COUNT,
        "reached": NUMBER,
        "without_spares": NUMBER,
        "by_tier": MAPPING,
        "usd_per_hour": NUMBER,
        "refused": TEXT,
    },
    "slo": {},  # each SLO's interval, by its text
    "model_error": {"class": MAPPING, "band": MAPPING},  # plan.model_error=measured
}
INTERVAL_SHAPE = {"mean": NUMBER, "ci_low": NUMBER, "ci_high": NUMBER}
# a capacity plan's answer (plan.solve=max_rate, sim.plan.capacity)
CAPACITY_SHAPE = {
    "outcome": TEXT,
    "rate_x": NUMBER,
    "misses_at_rate_x": NUMBER,
    "base_requests_per_s": NUMBER,
    "evaluated": [MAPPING],
    "requests_per_s": NUMBER,
    "input_tokens_per_s": NUMBER,
    "output_tokens_per_s": NUMBER,
    "replications": COUNT,
    "miss_probability": NUMBER,
    "slo": {},
    "interval": {"rate_x": INTERVAL_SHAPE, "requests_per_s": INTERVAL_SHAPE},
    "per_replication_rate_x": [NUMBER],
}
# plan.json as the planner writes it (sim.plan.answer, sim.plan.capacity), and
# plan_request.json
PLAN_SHAPE = {
    "slo": [TEXT],
    "confidence": NUMBER,
    "max_miss_probability": NUMBER,
    "base_overrides": [TEXT],
    "seed": COUNT,
    "candidates": [CANDIDATE_SHAPE],
    "solve": TEXT,
    "replicas": COUNT,
    "capacity": CAPACITY_SHAPE,
}
PLAN_REQUEST_SHAPE = {
    "plan": {"slo": [TEXT], "grid": MAPPING, "day": MAPPING},
    "base": [TEXT],
    "version": TEXT,
}


def _shape_of(shape: Any) -> str:
    if isinstance(shape, Kind):
        return shape.what
    return "a mapping" if isinstance(shape, dict) else "a list"


def check_shape(value: object, shape: Any, name: str, folder: Path, key: str = "") -> None:
    """A ConfigError on PATH naming the file ``name`` and the first key (``cost.usd_per_hour``,
    ``candidates[0].replicas``) whose value does not have its ``shape`` (see above)."""
    if isinstance(shape, Kind):
        fits = shape.test(value)
    elif isinstance(shape, dict):
        fits = isinstance(value, dict)
    else:
        fits = isinstance(value, list)
    if not fits:
        shown = json.dumps(value, default=str)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        where = f"{key} is {shown}" if key else f"holds {shown}"
        raise refuse(folder, f"{name}: {where}, not {_shape_of(shape)}")
    if isinstance(shape, dict):
        assert isinstance(value, dict)
        for sub, inner in shape.items():
            if value.get(sub) is not None:
                check_shape(value[sub], inner, name, folder, f"{key}.{sub}" if key else sub)
    elif isinstance(shape, list):
        assert isinstance(value, list)
        for at, item in enumerate(value):
            check_shape(item, shape[0], name, folder, f"{key}[{at}]")
