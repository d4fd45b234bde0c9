"""Capacity planning: ``fleetcast plan``, the cheapest fleet that meets the SLOs (or the
highest rate a fleet serves within them), with the uncertainty of each figure.

- ``slo``: SLO constraints on summary statistics (``ttft_s.p99 <= 2``), parsed and checked;
- ``replications``: independent replications of one point (seeds), their confidence intervals
  and the decision (meets, misses, or run more) with the probability of a miss;
- ``search``: the smallest replica count that meets, by bracketing and bisection;
- ``rounds``: the searches side by side in threads, their simulations launched together in
  rounds;
- ``runs``: each simulation of a plan, a job with its folder in the plan folder (a rerun
  resumes), and the local launcher;
- ``answer``: what a plan found per candidate, as ``plan.json``, ``plan.parquet`` rows and the
  ranked table;
- ``files``: how a plan writes ``plan.json`` (a point's SLO statistics) and ``plan.parquet`` (a
  simulation's columns), each file whole;
- ``candidates``: what a plan searches: the grid's combinations, the keys the planner sets
  itself, each candidate's fewest replicas (a disaggregated fleet's prefill pool plus one);
- ``settings``: the plan's settings (``plan.*``, a day plan's ``plan.day.*``) and a plan
  checked and ready to run, which every other module reads;
- ``searches``: one plan's searches side by side: each candidate's answer with its what-ifs
  and headroom, the progress, ``plan.parquet`` and ``plan.json``;
- ``planner``: the command, at the top of the package's imports: the plan checked
  (candidates from a grid or a list, an example run for the SLOs), then run as a plan of
  candidates or a day plan (``run_plan``, ``main``);
- ``rate_search``: the highest rate multiple that meets, by bracketing and bisection in
  ratio;
- ``capacity``: ``plan.solve=max_rate``, the highest arrival rate the fleet as given serves
  within its SLOs, with the interval of its replications' own capacities, its ``plan.json``
  and ``plan.parquet``;
- ``day``: a day of a ``daily`` workload planned by period, and three fleets for the day (the
  peak's, the seasonal plan, an autoscaled one) each simulated whole (``day_plan.json``);
- ``hourly``: a day's answer hour by hour: SLO attainment with Wilson intervals, and the plan's
  own SLO statistics over each hour's requests.
- ``spares``: the spare replicas (N + k) that keep N serving with a given probability at given
  failure, repair and reclaim rates, and the cheapest mix of price tiers that does.
- ``day_tiers``: a day plan's bill at price tiers, its commitments (reserved capacity) bought
  once for every period, each period completing them by the hour.

May import: the basics, ``sim.config`` (composing each point's config), ``sim.run`` (simulating
it), ``sim.sweeps.runs`` (flattening a summary as ``fleetcast collect`` does), ``sim.output``
(the summary table's number format; ``results``: an hour's latency statistics as a summary
computes them; ``model_error``: a candidate's step-time error band; ``cost``: a replica's
price at each tier its spares weigh), ``sim.catalog.hardware`` (that replica's GPU),
``sim.workload.day``
(a day's periods and the workloads that stand for them), and SciPy (t quantiles).
"""

# How a plan stopped by Ctrl-C ends, here where nothing is imported: ``sim.cli`` reads these
# before it imports the plan's modules, so a Ctrl-C that lands while they import still ends in
# the plan's line, its handler importing nothing the interrupted import may have left half-done.
# The exit status: 128 + SIGINT's number, as a shell reports a command Ctrl-C stopped.
INTERRUPTED_STATUS = 130
# the line before the plan's folder is written (after: ``sim.plan.runs.interrupted``'s)
STOPPED_BEFORE_RUNS = "interrupted: fleetcast plan stopped before any simulation ran"
