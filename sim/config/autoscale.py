"""The ``autoscale`` group's shape: a fleet whose replica count changes during the run.

``policy`` says who decides (``sim.fleet.autoscaler`` does the deciding):

- ``none`` (the default): ``fleet.replicas`` replicas all run long, as before;
- ``utilization``, ``concurrency``, ``rate``, ``queue``, ``kv``: a metric-driven autoscaler,
  Kubernetes' Horizontal Pod Autoscaler's rule on the replicas' busy fraction, their requests
  in flight each, the requests per second each is sent, their requests waiting, or their
  KV-cache use;
- ``schedule``: replica counts (and engine configurations) set by the time of day, the way a
  seasonal plan runs its fleet.

``engines`` names alternative engine configurations a schedule may switch to (seasonal
engines): each maps config keys to values over the run's own config (``base``), a group key
(``hardware``, ``scheduler``, ``step_time``, ``precision``) naming one of that group's options.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from sim.config.validation import (
    MAX_REPLICAS,
    Int,
    NonNegative,
    Positive,
    StrictModel,
    Text,
)
from sim.errors import ConfigError, require

# the metric each policy targets when ``autoscale.target`` is null
DEFAULT_TARGETS = {"utilization": 0.7, "concurrency": 16.0, "rate": 4.0, "queue": 2.0, "kv": 0.8}
BASE_ENGINE = "base"  # the run's own engine configuration, in a schedule


class ScheduledFleet(StrictModel):
    """From ``at_s`` on, ``replicas`` replicas of engine ``engine``."""

    at_s: NonNegative
    replicas: Annotated[Int, Field(ge=1, le=MAX_REPLICAS)]
    engine: Text = BASE_ENGINE


class AutoscaleConfig(StrictModel):
    section: ClassVar[str] = "autoscale"

    policy: Literal["none", "utilization", "concurrency", "rate", "queue", "kv", "schedule"] = (
        "none"
    )
    target: Positive | None = None  # null: DEFAULT_TARGETS[policy]
    # no change while the metric is within this fraction of the target (HPA's default 0.1)
    tolerance: Annotated[float, Field(ge=0, lt=1)] = 0.1
    interval_s: Positive = 15.0  # how often the policy looks (HPA's sync period)
    # scale down to the highest count recommended over this window (HPA's stabilisation)
    scale_down_window_s: NonNegative = 300.0
    provision_s: NonNegative = 240.0  # from the request for a replica to its first request
    min_replicas: Annotated[Int, Field(ge=1, le=MAX_REPLICAS)] = 1
    max_replicas: Annotated[Int, Field(ge=1, le=MAX_REPLICAS)] = 64
    schedule: list[ScheduledFleet] | None = None
    engines: dict[str, dict[str, Any]] = {}

    @property
    def enabled(self) -> bool:
        return self.policy != "none"

    @property
    def metric_target(self) -> float:
        return self.target if self.target is not None else DEFAULT_TARGETS[self.policy]


def check_autoscale(auto: AutoscaleConfig) -> None:
    """What the schema cannot see field by field, one line naming the field."""
    require(
        auto.min_replicas <= auto.max_replicas,
        "autoscale.min_replicas",
        auto.min_replicas,
        f"is above autoscale.max_replicas ({auto.max_replicas})",
    )
    if auto.policy != "schedule":
        require(
            auto.schedule is None,
            "autoscale.schedule",
            "[...]",
            f"is read only with autoscale.policy=schedule, not {auto.policy}",
        )
        return
    if not auto.schedule:
        raise ConfigError(
            "autoscale.schedule",
            auto.schedule,
            "autoscale.policy=schedule needs the fleets, e.g. "
            "'autoscale.schedule=[{at_s: 0, replicas: 2}, {at_s: 28800, replicas: 6}]'",
        )
    previous = -1.0
    for i, entry in enumerate(auto.schedule):
        require(
            entry.at_s > previous and (i > 0 or entry.at_s == 0),
            f"autoscale.schedule[{i}].at_s",
            entry.at_s,
            "the first fleet starts at 0 and each next one later",
        )
        previous = entry.at_s
        require(
            entry.engine == BASE_ENGINE or entry.engine in auto.engines,
            f"autoscale.schedule[{i}].engine",
            entry.engine,
            f"is neither {BASE_ENGINE!r} (this run's configuration) nor one of "
            f"autoscale.engines ({', '.join(sorted(auto.engines)) or 'none given'})",
        )
    require(
        BASE_ENGINE not in auto.engines,
        f"autoscale.engines.{BASE_ENGINE}",
        "{...}",
        "is the name of this run's own configuration: choose another",
    )
