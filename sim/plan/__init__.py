"""Capacity planning: ``fleetcast plan``, the cheapest fleet that meets the SLOs, with the
uncertainty of each figure.

- ``slo``: SLO constraints on summary statistics (``ttft_s.p99 <= 2``), parsed and checked;
- ``replications``: independent replications of one point (seeds), their confidence intervals
  and the decision (meets, misses, or run more) with the probability of a miss;
- ``search``: the smallest replica count that meets, by bracketing and bisection;
- ``planner``: the command: candidates from a grid, the searches, the plan folder
  (``plan.parquet``, ``plan.json``, a run cache that makes a rerun resume) and the ranked table.

May import: the basics, ``sim.config`` (composing each point's config), ``sim.run`` (simulating
it), ``sim.sweeps.runs`` (flattening a summary as ``fleetcast collect`` does), ``sim.output``
(the summary table's number format), and SciPy (t quantiles).
"""
