"""Faults wrap the shape the registry picked (``sim.deploy.shapes.WRAPPERS``,
``sim.deploy.faulty``): off, the bare shape; on, the same shape inside, whose bill and blocks
pass through, refused with what it does not model yet; an autoscaled and a disaggregated
fleet wrapped, with the replacements the autoscaler makes instead of the faults' own."""

from __future__ import annotations

import pytest

from sim.config.schema import validate_run
from sim.deploy.autoscaled import AutoscaledFleet
from sim.deploy.disaggregated import DisaggregatedFleet
from sim.deploy.faulty import FaultyFleet
from sim.deploy.fixed import FixedFleet
from sim.deploy.shapes import fleet_shape
from sim.errors import ConfigError
from sim.output.run_files import FAULTS_FILE
from sim.run import simulate
from tests.scenarios import TINY
from tests.support import compose

DOWN_AT_ONCE = "faults.schedule=[{replica: 0, at_s: 0.5, repair_s: 0.5}]"
TIERS = "fleet.tiers={reserved: 1, spot: rest}"


def _shape(*overrides: str):
    cfg = compose(*overrides)
    return fleet_shape(cfg, validate_run(cfg))


def test_faults_off_leave_the_shape_bare_and_on_wrap_it():
    assert type(_shape(*TINY)) is FixedFleet
    faulty = _shape(*TINY, DOWN_AT_ONCE)
    assert isinstance(faulty, FaultyFleet) and type(faulty.inner) is FixedFleet
    assert faulty.placement is faulty.inner.placement


def test_a_down_replica_is_still_billed_and_its_tiers_pass_through():
    """Two replicas at price tiers, one down for half a second: the bill and its tiers are
    the fleet's as bought, whatever was down; the run writes faults.parquet."""
    plain = simulate(compose(*TINY, "fleet.replicas=2", TIERS))
    faulty = simulate(compose(*TINY, "fleet.replicas=2", TIERS, DOWN_AT_ONCE))
    assert faulty.summary["cost"]["usd_per_hour"] == plain.summary["cost"]["usd_per_hour"]
    assert faulty.summary["cost"]["per_tier"] == plain.summary["cost"]["per_tier"]
    assert FAULTS_FILE in faulty.tables and FAULTS_FILE not in plain.tables
    assert faulty.summary["faults"]["replica_hours_down"] * 3600 == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["frontend.token_s=0.001"], "frontend.token_s"),
        (["spec_decode.num_draft_tokens=2"], "spec_decode.num_draft_tokens"),
    ],
    ids=["frontend", "speculative"],
)
def test_what_faults_do_not_model_yet_is_refused_by_its_key(overrides, field):
    with pytest.raises(ConfigError) as refused:
        _shape(*TINY, *overrides, "faults.gpu_mtbf_h=1000")
    assert refused.value.field == field
    assert "faults are not modelled with" in refused.value.reason


@pytest.mark.parametrize(
    ("overrides", "inner"),
    [
        (["autoscale.policy=utilization"], AutoscaledFleet),
        (["placement=disaggregated", "fleet.replicas=2"], DisaggregatedFleet),
    ],
    ids=["autoscaled", "disaggregated"],
)
def test_autoscaled_and_disaggregated_fleets_take_faults(overrides, inner):
    faulty = _shape(*TINY, *overrides, "faults.gpu_mtbf_h=1000")
    assert isinstance(faulty, FaultyFleet) and type(faulty.inner) is inner


@pytest.mark.parametrize(
    ("fault", "field"),
    [
        ("faults.schedule=[{replica: 0, at_s: 1, repair_s: 5}]", "faults.schedule[0].repair_s"),
        ("faults.spot=[{replica: 0, at_s: 1, replace_s: 5}]", "faults.spot[0].replace_s"),
    ],
    ids=["repair", "replace"],
)
def test_an_autoscaled_fleet_refuses_the_faults_own_replacements(fault, field):
    with pytest.raises(ConfigError) as refused:
        _shape(*TINY, "autoscale.policy=utilization", fault)
    assert refused.value.field == field
    assert "the autoscaler replaces" in refused.value.reason


def test_an_autoscaled_fleet_takes_events_for_replicas_it_adds_later():
    """Replica ids beyond the fleet at time 0 are not refused: the autoscaler may add them
    (an event for one not in the fleet at its time is none:
    tests/fleet/test_faults_autoscaled.py)."""
    later = "faults.schedule=[{replica: 9, at_s: 1}]"
    faulty = _shape(*TINY, "autoscale.policy=utilization", later)
    assert isinstance(faulty, FaultyFleet)
