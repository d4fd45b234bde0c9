"""The traffic: when requests arrive and how long they are.

- ``source``: the ``Workload`` a run replays, built from the ``workload`` config;
- ``arrivals``: open-loop arrival processes (Poisson, gamma, constant, daily);
- ``day``: a day's traffic: the rate by hour of day (a profile or a trace's arrivals), the
  lengths by hour, and the periods a planner sizes;
- ``lengths``: prompt and output length distributions;
- ``traces``: replaying recorded traces (Parquet or CSV), windows and rate scaling;
- ``sessions``: conversations, whose turns resend what was said before;
- ``prefixes``: a trace's ``hash_ids`` or a conversation's segments (shared prompt prefixes)
  as groups of engine blocks.

May import: ``sim.errors``, ``sim.rng``, ``sim.resources``, ``sim.config``,
``sim.arrow_numpy``. A workload knows nothing of the fleet that serves it.
"""

from sim.workload.source import Workload, build_workload

__all__ = ["Workload", "build_workload"]
