"""The fleet shapes a run can have, and the one a checked config asks for.

``SHAPES`` lists them most specific first; ``fleet_shape`` builds the first whose ``applies``
says the config asks for it (``FixedFleet`` applies to any). A new shape is one module of
``sim.deploy`` (a ``FleetShape``, ``sim.deploy.shape``), its config group, and its class here,
before the shapes it refines. A feature that combines with every shape (faults) wraps the shape
picked instead (``WRAPPERS``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sim.config.schema import RunConfig
from sim.deploy.autoscaled import AutoscaledFleet
from sim.deploy.disaggregated import DisaggregatedFleet
from sim.deploy.faulty import FaultyFleet
from sim.deploy.fixed import FixedFleet
from sim.deploy.shape import FleetShape

# (disaggregated first: it refuses autoscaling in its own terms)
SHAPES: tuple[type[FleetShape], ...] = (DisaggregatedFleet, AutoscaledFleet, FixedFleet)
# features that combine with every shape: each wraps the shape picked when its config asks
# (``applies``), built from it (``Wrapper(inner)``), in this order
WRAPPERS: tuple[type[FaultyFleet], ...] = (FaultyFleet,)


def fleet_shape(
    cfg: dict[str, Any], run: RunConfig, shapes: Sequence[type[FleetShape]] = SHAPES
) -> FleetShape:
    """The fleet ``run`` (``cfg`` checked) asks for, built: the first of ``shapes`` that
    applies (LookupError when none does: a list of shapes without ``FixedFleet``), wrapped in
    each of ``WRAPPERS`` that applies."""
    for shape in shapes:
        if shape.applies(run):
            fleet = shape(cfg, run)
            break
    else:
        raise LookupError(f"no fleet shape of {[s.__name__ for s in shapes]} applies to this run")
    for wrapper in WRAPPERS:
        if wrapper.applies(run):
            fleet = wrapper(fleet)
    return fleet
