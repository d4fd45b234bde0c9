"""Fleetcast's sweeper: Hydra's basic sweeper without its up-front check of every job.

Before launching a batch, Hydra's basic sweeper composes every job's full config in the
launching process, one after the other, to fail early on a bad override. Composing a config
takes about 0.3 s, so a 200-job sweep spent a minute on that alone, on one core, before any job
started. Here each job checks its own config where it runs, in parallel, and a bad one is
recorded in the job's ``error.txt`` while the other jobs go on (``sim.cli``). Everything else
(the sweep syntax, batching, job numbering) is the basic sweeper's.

No ``from __future__ import annotations`` here: Hydra runs plugin modules before registering
them in ``sys.modules``, where a dataclass with postponed annotations looks itself up.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper, BasicSweeperConf
from hydra.core.config_store import ConfigStore


@dataclass
class FleetcastSweeperConf(BasicSweeperConf):
    _target_: str = "hydra_plugins.fleetcast_sweeper.fleetcast_sweeper.FleetcastSweeper"


ConfigStore.instance().store(
    group="hydra/sweeper", name="fleetcast", node=FleetcastSweeperConf, provider="fleetcast"
)


class FleetcastSweeper(BasicSweeper):
    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        # Each job validates its own config, in parallel (see the module docstring).
        return None
