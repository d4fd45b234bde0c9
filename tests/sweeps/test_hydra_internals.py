"""The Hydra internals Fleetcast builds on: if a Hydra release changes them, these tests fail
first and loudly (the pin in pyproject.toml says which releases were checked)."""

import inspect

import hydra
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper, BasicSweeperConf
from hydra.core.override_parser.overrides_parser import OverridesParser

from hydra_plugins.fleetcast_sweeper.fleetcast_sweeper import (
    FleetcastSweeper,
    FleetcastSweeperConf,
)


def test_hydra_is_the_release_the_pin_allows():
    major, minor = (int(x) for x in hydra.__version__.split(".")[:2])
    assert (major, minor) == (1, 3), (
        f"Hydra {hydra.__version__}: hydra_plugins/fleetcast_sweeper subclasses Hydra 1.3's "
        "private BasicSweeper; check it before widening the pin in pyproject.toml"
    )


def test_the_basic_sweeper_still_checks_each_batch_through_the_hook_we_replace():
    # FleetcastSweeper skips the up-front composition of every job by overriding this hook;
    # if the basic sweeper stopped calling it, sweeps would silently get slow again.
    assert "self.validate_batch_is_legal(batch)" in inspect.getsource(BasicSweeper.sweep)
    assert FleetcastSweeper.validate_batch_is_legal is not BasicSweeper.validate_batch_is_legal
    assert FleetcastSweeper.validate_batch_is_legal(None, [["a=1"]]) is None
    assert issubclass(FleetcastSweeperConf, BasicSweeperConf)
    assert FleetcastSweeperConf._target_.endswith("fleetcast_sweeper.FleetcastSweeper")


def test_the_override_parser_counts_sweeps_as_the_monitor_expects():
    parsed = OverridesParser.create().parse_overrides(["a=1,2", "b=3", "c=range(0,3)"])
    sweeps = {
        o.key_or_group: len(list(o.sweep_string_iterator()))
        for o in parsed
        if o.is_sweep_override()
    }
    assert sweeps == {"a": 2, "c": 3}
