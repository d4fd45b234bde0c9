"""The ``faults`` group's shape: replicas that fail, drain for maintenance, or are reclaimed.

Three sources of lost capacity, any mix of them (``sim.fleet.faults`` runs them):

- random failures: each GPU fails on average once every ``gpu_mtbf_h`` hours, so a replica of
  ``tp x pp`` GPUs fails at ``gpus / gpu_mtbf_h`` per hour (a failed GPU takes its whole
  replica down); it is back after a repair time, ``repair_h`` on average, exponential or
  fixed (``repair``); ``schedule`` adds failures at given times, for exact scenarios;
- ``maintenance``: a replica stops taking requests, finishes what it holds (or hands it to
  the others after ``deadline_s``), leaves for ``duration_s``, and comes back;
- ``spot``: a reclaim notice; the replica stops taking requests at the notice and is lost at
  its end (``replace_s`` later a replacement comes, if given); ``spot_reclaims_per_h`` draws
  such reclaims at random, at a rate per replica-hour, on each replica bought spot
  (``sim.deploy.tiers.spot_replicas``), with ``spot_notice_s`` and ``spot_replace_s``.

``on_failure`` says what becomes of the requests on a replica that goes: ``retry`` (sent again
to another replica, prefill from scratch, the time lost counted) or ``fail`` (they end failed,
with the cause). Off by default: no MTBF and no events, and a run is as before.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from sim.config.validation import MAX_REPLICAS, Int, NonNegative, Positive, StrictModel

ReplicaId = Annotated[Int, Field(ge=0, lt=MAX_REPLICAS)]


class ScheduledFailure(StrictModel):
    """Replica ``replica`` fails at ``at_s`` and is back ``repair_s`` later (null: never)."""

    replica: ReplicaId
    at_s: NonNegative
    repair_s: Positive | None = None


class Maintenance(StrictModel):
    """Replica ``replica`` drains from ``at_s``, leaves once empty (or hands over what it still
    holds ``deadline_s`` after ``at_s``; null: waits for it all), and is back ``duration_s``
    after it left."""

    replica: ReplicaId
    at_s: NonNegative
    duration_s: Positive
    deadline_s: NonNegative | None = None


class SpotReclaim(StrictModel):
    """Replica ``replica`` gets a reclaim notice at ``at_s`` and is lost ``notice_s`` later; a
    replacement serves ``replace_s`` after the loss (null: none within the run)."""

    replica: ReplicaId
    at_s: NonNegative
    notice_s: NonNegative = 30.0
    replace_s: Positive | None = None


class FaultsConfig(StrictModel):
    """``configs/faults/default.yaml`` says what each key means and why its default."""

    section: ClassVar[str] = "faults"

    gpu_mtbf_h: NonNegative | None = None  # mean time between failures of one GPU; null/0: none
    repair: Literal["exponential", "fixed"] = "exponential"
    repair_h: Positive = 4.0  # mean time to repair or replace a failed replica
    on_failure: Literal["retry", "fail"] = "retry"
    schedule: list[ScheduledFailure] = []
    maintenance: list[Maintenance] = []
    spot: list[SpotReclaim] = []
    # random reclaims of each spot replica, per replica-hour it serves; null: none
    spot_reclaims_per_h: Positive | None = None
    spot_notice_s: NonNegative = 120.0  # a random reclaim's notice (AWS: two minutes)
    spot_replace_s: Positive | None = None  # a replacement serves this long after; null: none

    @property
    def random_failures(self) -> bool:
        return bool(self.gpu_mtbf_h)

    @property
    def random_reclaims(self) -> bool:
        return self.spot_reclaims_per_h is not None

    @property
    def enabled(self) -> bool:
        return (
            self.random_failures
            or self.random_reclaims
            or bool(self.schedule or self.maintenance or self.spot)
        )
