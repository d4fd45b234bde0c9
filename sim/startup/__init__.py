"""What a run does before its first event, and the one piece kept to make it shorter.

The path of ``fleetcast [run] OVERRIDES`` (``python -m sim``), in order:

1. ``sim.cli`` is imported, with ``sim.config.compose`` and ``compose_cache``: nothing heavy
   (Hydra and OmegaConf are imported where they are used);
2. a single run (no flags, no ``hydra.*`` overrides) looks its command line up in the compose
   cache (``compose_cache``). Found: its composed config is read back from a JSON file, and
   neither Hydra nor the override check runs. Not found: the overrides are checked
   (``sim.config.compose.check_overrides``), then Hydra is imported and composes the ~30
   config files, in the run's own process;
3. the output folder is checked, ``sim.run`` and what it needs are imported (numpy, pydantic,
   pyarrow, SimPy, OmegaConf: about 250 ms), and ``sim.run.simulate`` builds the deployment,
   the workload and the cluster, to the first simulated event;
4. after the run's files, ``.hydra/`` is written and the composed config is kept in the cache
   for the next run of the same command.

Every other command (sweeps, plan, report, calibrate, ...) composes through Hydra: they run
for long, or run many simulations, and the cache does not matter to them.

Each piece was measured against its absence by ``benchmarks/bench_startup.py`` (default
config, ``workload.num_requests=200``, on 2026-12-05: a 2-core machine shared with other work,
so configurations alternated, 21 tries each, best and median). Required to stay, stated before
measuring: a saving of at least 10% of a run's start-up to its first event, on the best tries
and on the medians alike.

- kept, ``compose_cache`` (``FLEETCAST_COMPOSE_CACHE=0`` turns it off): a repeated run
  reaches its first event in 325 ms against 471 ms without (146 ms, 45% of its start-up;
  median 512 ms; 242 ms of CPU);
- removed, the collector paused and frozen while a run started: it saved about 40 ms of CPU,
  but 16-28 ms (3-5%) on the best tries, within the machine's noise;
- removed, composing in a forked child beside the run's imports (``FLEETCAST_COMPOSE_AHEAD``,
  now ignored): it needs an idle second core, where its best try saved 106 ms of a first
  run's start-up (24%), while its median cost 237 ms and it always added ~40 ms of CPU (the
  fork, the pickled config).

May import: the basics, ``sim.config.compose`` (the override check, ``to_dict``) and Hydra.
"""
