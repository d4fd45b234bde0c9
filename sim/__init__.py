"""Fleetcast: a discrete-event simulator of LLM serving fleets.

The data flows one way, and the packages follow it::

    workload -> fleet (router -> replica) -> engine (scheduler <-> KV cache -> step time)
             -> output (rows -> Parquet, summary, cost) -> sweeps (many runs as a dataset)

``config`` composes and checks what a run is given, ``catalog`` describes what is deployed, and
``calibration`` fits step-time profiles offline. At the top: ``run`` (one simulation from a config,
the composition root), ``deploy`` (what a run deploys: the fleet's shape, fixed, autoscaled or
disaggregated, its engine configurations, speculative decoding's drafter), ``cli`` (the
``fleetcast`` command), and the basics every
package may import: ``errors``, ``rng``, ``resources`` (where shipped configs and data are) and
``arrow_numpy``. Then ``plan`` (capacity plans, and a day's plans, driving runs through
``run``) and ``report`` (HTML and Markdown reports, reading run, sweep and plan folders only).
"""

__version__ = "0.1.0"
