"""``fleetcast plan`` as a Hydra sweeper: the plan's searches choose the jobs, round by round,
and the configured launcher runs them (``hydra/launcher``: local processes through joblib by
default, a Ray cluster with ``fleetcast_ray``), as it runs a sweep's.

``fleetcast plan`` checks the plan, writes it to ``plan_request.json`` in the plan folder and
starts a Hydra multirun with ``hydra/sweeper=fleetcast_plan hydra.sweeper.request=PATH``
(``sim.plan.planner.main``). Each job is one simulation: its overrides, and its folder
``runs/KEY`` under the plan folder (``hydra.sweep.subdir``); Hydra's task runs it
(``sim.cli._run_task``) and returns its summary, which comes back by value (a Ray worker's disk
need not be shared).

No ``from __future__ import annotations`` here: Hydra runs plugin modules before registering
them in ``sys.modules``, where a dataclass with postponed annotations looks itself up.
"""

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


@dataclass
class FleetcastPlanSweeperConf:
    _target_: str = "hydra_plugins.fleetcast_sweeper.plan_sweeper.FleetcastPlanSweeper"
    request: str | None = None  # plan_request.json, written by `fleetcast plan`


ConfigStore.instance().store(
    group="hydra/sweeper",
    name="fleetcast_plan",
    node=FleetcastPlanSweeperConf,
    provider="fleetcast",
)


class FleetcastPlanSweeper(Sweeper):
    def __init__(self, request: str | None = None) -> None:
        super().__init__()
        self.request = request
        self.launcher: Launcher | None = None
        self.next_job = 0

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def launch(self, jobs: Sequence[Any]) -> list[Any]:
        """One round: each job's overrides and folder, through the launcher; their results."""
        from sim.plan.runs import RUNS_FOLDER

        assert self.launcher is not None
        returns = self.launcher.launch(
            [[*job.overrides, f"hydra.sweep.subdir={RUNS_FOLDER}/{job.key}"] for job in jobs],
            initial_job_idx=self.next_job,
        )
        self.next_job += len(jobs)
        return [r.return_value for r in returns]  # (raises a job's error)

    def sweep(self, arguments: list[str]) -> Any:
        from sim.errors import ConfigError
        from sim.plan.planner import Prepared, execute
        from sim.plan.runs import interrupted

        if self.request is None or arguments:
            print(
                "error: hydra/sweeper=fleetcast_plan: run it through `fleetcast plan`",
                file=sys.stderr,
            )
            sys.exit(2)
        prepared = Prepared.read(Path(self.request))
        try:
            return execute(prepared, self.launch, progress=True)
        except ConfigError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)
        except KeyboardInterrupt:  # Ctrl-C: one line, the workers stopped, exit status 130
            sys.exit(interrupted(prepared.folder))
