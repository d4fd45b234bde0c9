"""What a run does before its first event, and the two pieces kept to make it shorter.

The path of ``fleetcast [run] OVERRIDES`` (``python -m sim``), in order:

1. ``sim.cli`` is imported, with ``sim.config.compose`` and ``compose_cache``: nothing heavy
   (Hydra and OmegaConf are imported where they are used), and ``main`` pauses the garbage
   collector (``STARTUP``, below);
2. a single run (no flags, no ``hydra.*`` overrides) looks its command line up in the compose
   cache (``compose_cache``). Found: its composed config is read back from a JSON file, and
   neither Hydra nor the override check runs. Not found: the overrides are checked
   (``sim.config.compose.check_overrides``), then Hydra is imported and composes the ~30
   config files, in the run's own process;
3. the output folder is checked, ``sim.run`` and what it needs are imported (numpy, pydantic,
   pyarrow, SimPy, OmegaConf: about 250 ms), the collector is given back, frozen over what
   start-up built, and ``sim.run.simulate`` builds the deployment, the workload and the
   cluster, to the first simulated event;
4. after the run's files, ``.hydra/`` is written and the composed config is kept in the cache
   for the next run of the same command.

Every other command (sweeps, plan, report, calibrate, ...) composes through Hydra, without the
pause: they run for long, or run many simulations, and neither piece matters to them.

Each piece was measured against its absence by ``benchmarks/bench_startup.py`` (default
config, ``workload.num_requests=200``; 2026-12-05, four invocations on a 2-core machine shared
with other work, so configurations alternated, 21 tries each; two configurations that run the
same code differed by up to 61 ms on the best tries: the noise). Required to stay, stated
before measuring: a saving of at least 10% of a run's start-up to its first event.

- ``compose_cache`` (``FLEETCAST_COMPOSE_CACHE=0`` turns it off): 225-302 ms less CPU to a
  repeated run's exit in every measurement; on the best tries its first event 146-279 ms
  sooner (45-80% of its start-up) in all but one (27 ms);
- the collector pause (``StartupPause``, here): 36-54 ms less CPU to a repeated run's first
  event in every measurement (10-15%), -2% to 14% of its start-up on the best tries: at the
  margin, kept;
- removed, composing in a forked child beside the run's imports (``FLEETCAST_COMPOSE_AHEAD``,
  now ignored): it needs an idle second core; on the best tries it saved 89-106 ms twice and
  cost 51-64 ms twice, on the medians it cost 160-250 ms each time, and it always added
  40-90 ms of CPU (the fork, the pickled config).

May import: the basics, ``sim.config.compose`` (the override check, ``to_dict``) and Hydra.
"""

from __future__ import annotations

import gc


class StartupPause:
    """The cyclic garbage collector, paused while a run starts.

    Before its first event a run imports its modules and Hydra composes its config: about
    110,000 tracked objects, few of them garbage, over which the collector would make a dozen
    passes (about 40 ms of CPU, measured above).
    ``begin`` pauses it; ``end`` (before the simulation) gives it back as it was. As the command
    (``freeze``: the process ends with the run), ``end`` first freezes what start-up built, so
    that the collector does not walk it again either; the ~10,000 objects of start-up garbage
    among it are held until the process exits. In-process callers (``main(argv)``), and
    processes that froze objects of their own, are not frozen: their garbage stays collectable.
    ``release`` (when ``main`` returns) undoes whatever is left.
    """

    def __init__(self) -> None:
        self.paused = self.freeze = self.frozen = self.was_enabled = False

    def begin(self, freeze: bool = False) -> None:
        if not self.paused:
            self.paused, self.was_enabled = True, gc.isenabled()
            self.freeze = freeze and gc.get_freeze_count() == 0
            gc.disable()

    def end(self) -> None:
        if self.paused:
            self.paused = False
            if self.freeze:
                gc.freeze()
                self.frozen = True
            if self.was_enabled:
                gc.enable()

    def release(self) -> None:
        if self.paused:  # the run never started: nothing to freeze
            self.paused = False
            if self.was_enabled:
                gc.enable()
        if self.frozen:
            self.frozen = False
            gc.unfreeze()


STARTUP = StartupPause()
