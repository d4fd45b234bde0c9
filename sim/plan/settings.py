"""A plan's settings (``plan.*``, ``configs/plan/default.yaml``; a day plan's ``plan.day.*``)
and a plan checked and ready to run (``Prepared``): what every other part of ``sim.plan``
reads, so that none needs the command (``sim.plan.planner``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Final, Literal

from omegaconf import OmegaConf
from pydantic import Field, field_validator

import sim
from sim.config.validation import Count, Positive, StrictModel, validate
from sim.errors import ConfigError
from sim.plan.candidates import refuse_planned
from sim.plan.hourly import HOURS
from sim.resources import config_dir


class DayPlanConfig(StrictModel):
    section: ClassVar[str] = "plan.day"

    # null: no day plan; N: N periods found from the rate curve; or [[start, end], ...]
    periods: Annotated[int, Field(ge=1, le=HOURS)] | list[list[int]] | None = None
    period_s: Positive = 900.0  # simulated seconds of each period's stationary runs
    # overrides of the autoscaled answer's autoscale.* (policy, target, provision_s, ...)
    autoscale: dict[str, Any] = Field(default_factory=dict)


class FaultsPlanConfig(StrictModel):
    """The spare replicas (N + k) a plan adds for failures, computed rather than simulated
    (``sim.plan.spares``): ``configs/plan/default.yaml`` says what each key means."""

    section: ClassVar[str] = "plan.faults"

    # P(at least N replicas up) asked for; null: off (faults, if any, are simulated as before)
    availability: Annotated[float, Field(gt=0, lt=1)] | None = None
    # the price tiers mixed for the N + k replicas; null: the run's own price
    tiers: list[Literal["on_demand", "reserved", "reserved_3y", "spot"]] | None = None
    max_spares: Annotated[int, Field(ge=0, le=256)] = 16

    @field_validator("tiers")
    @classmethod
    def _some_tiers(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and (not value or len(set(value)) != len(value)):
            raise ValueError("name each price tier once, at least one, or null for the run's own")
        return value


# what a plan answers: the cheapest fleet meeting the SLOs (sim.plan.searches), or the highest
# arrival rate the given fleet serves at them (sim.plan.capacity)
CHEAPEST_FLEET: Final = "cheapest_fleet"
MAX_RATE: Final = "max_rate"


class PlanConfig(StrictModel):
    section: ClassVar[str] = "plan"

    slo: list[str]
    solve: Literal["cheapest_fleet", "max_rate"] = CHEAPEST_FLEET
    # max_rate: the rate multiples searched (sim.arrival_rate_scale), from 1 doubling up to
    # max_rate_factor or halving down to min_rate_factor, then bisected in ratio until the
    # multiple that meets and the one that misses are within rate_tolerance of each other
    max_rate_factor: Annotated[float, Field(gt=1)] = 16.0
    min_rate_factor: Annotated[float, Field(gt=0, lt=1)] = 0.0625
    rate_tolerance: Annotated[float, Field(ge=0.001, lt=1)] = 0.02
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    # candidates given one by one (added to the grid's), each a list of overrides
    candidates: list[list[str]] = Field(default_factory=list)
    max_replicas: Count = 64
    min_replications: Count = 3
    max_replications: Count = 10
    confidence: float = Field(0.95, gt=0, lt=1)
    # the largest share of a chosen count's replications that may miss an SLO
    max_miss_probability: float = Field(0.2, ge=0, le=1)
    jobs: Count | None = None
    output_dir: str | None = None
    # what-ifs at each answer: the count if every step were this much slower or faster, and
    # if the arrival rate were this much higher (sim.step_time_scale, sim.arrival_rate_scale)
    step_time_scales: list[Annotated[float, Field(gt=0)]] = Field(default_factory=list)
    rate_scales: list[Annotated[float, Field(gt=0)]] = Field(default_factory=list)
    # the headroom: the rate multiple at which the chosen fleet stops being stable (the knee),
    # searched up to this multiple (null: not searched)
    max_headroom: Annotated[float, Field(gt=1)] | None = None
    # the headroom to the SLO: at each cheapest-fleet answer, the highest rate multiple at which
    # the chosen fleet still meets every SLO (max_rate's search, within its factors and
    # tolerance, without the interval); false: not searched
    slo_headroom: bool = False
    # the step-time model's own error (sim.output.model_error): measured: each answer searched
    # again with every step at the band's p50 and p90 multiple (measured / simulated TPOT of
    # the deployment's class in the validation rows); off: not searched
    model_error: Literal["off", "measured"] = "off"
    # the bands table model_error reads; null: the shipped data/model_error/bands.csv
    model_error_table: str | None = None

    @field_validator("model_error", mode="before")
    @classmethod
    def _off_is_off(cls, value: Any) -> Any:
        """YAML reads a bare ``off`` as false."""
        return "off" if value is False else value

    # the first replication's seed (then seed + 1, ...); null: the config's seed
    seed: Annotated[int, Field(ge=0, le=2**31 - 1)] | None = None
    # a day of a `daily` workload planned by period (sim.plan.day); periods null: no day plan
    day: DayPlanConfig = Field(default_factory=DayPlanConfig)
    # spare replicas for failures at given rates, computed exactly (sim.plan.spares)
    faults: FaultsPlanConfig = Field(default_factory=FaultsPlanConfig)


def load_plan(overrides: list[str]) -> tuple[PlanConfig, list[str]]:
    """The plan settings (defaults, then the ``plan.*`` overrides) and the other overrides."""
    mine = [o for o in overrides if o.startswith("plan.")]
    rest = [o for o in overrides if not o.startswith("plan.")]
    node = OmegaConf.load(config_dir() / "plan" / "default.yaml")
    try:
        given = OmegaConf.from_dotlist([o.removeprefix("plan.") for o in mine])
        merged = OmegaConf.to_container(OmegaConf.merge(node, given))
    except Exception as err:  # OmegaConf's grammar and merge errors have many types
        reason = " ".join(str(err).split())
        raise ConfigError("plan", " ".join(mine), f"cannot read: {reason}") from None
    plan: PlanConfig = validate(PlanConfig, merged, "plan")
    # the capacity of a fleet takes its replica count as given (sim.plan.capacity)
    refuse_planned(rest, keep_replicas=plan.solve == MAX_RATE)
    return plan, rest


@dataclass
class Prepared:
    """A plan checked and ready to run: its settings, base overrides, first seed, candidates
    and folder (``plan_request.json`` in the folder, for Hydra's sweeper)."""

    plan: PlanConfig
    base: list[str]
    seed: int
    candidates: list[list[str]]
    folder: Path
    day_workload: dict[str, Any] | None = None  # a day plan's base workload, composed
    # each candidate's fewest replicas (fewest_replicas); None: 1 for every candidate
    fewest: list[int] | None = None
    # a capacity plan's (plan.solve=max_rate) fleet size, as given; None: the count is searched
    replicas: int | None = None
    # plan.model_error=measured: each candidate's class and band (``ModelError.json``), looked
    # up here since the searches run inside Hydra's sweeper, where no config is composed
    model_errors: list[dict[str, Any]] | None = None
    # plan.faults.availability: each candidate's replica at each tier to mix (``spare_tiers``:
    # its $/hour, its unavailability) and the fault rates, found here for the same reason
    spares: list[dict[str, Any]] | None = None

    REQUEST_FILE: ClassVar[str] = "plan_request.json"

    def write(self) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / self.REQUEST_FILE
        text = json.dumps(
            {
                "plan": self.plan.model_dump(),
                "base": self.base,
                "seed": self.seed,
                "candidates": self.candidates,
                "folder": str(self.folder),
                "day_workload": self.day_workload,
                "fewest": self.fewest,
                **({"replicas": self.replicas} if self.replicas is not None else {}),
                **({"model_errors": self.model_errors} if self.model_errors is not None else {}),
                **({"spares": self.spares} if self.spares is not None else {}),
                "version": sim.__version__,
            },
            indent=1,
        )
        tmp = path.with_name(f".{path.name}.partial")
        tmp.write_text(text + "\n")
        tmp.replace(path)
        return path

    @classmethod
    def read(cls, path: Path) -> Prepared:
        given = json.loads(path.read_text())
        return cls(
            validate(PlanConfig, given["plan"], "plan"),
            given["base"],
            given["seed"],
            given["candidates"],
            Path(given["folder"]),
            given.get("day_workload"),
            given.get("fewest"),
            given.get("replicas"),
            given.get("model_errors"),
            given.get("spares"),
        )
