"""Reports: ``fleetcast report PATH`` turns a run, sweep, plan or day-plan folder into one
self-contained HTML page and a Markdown file with its figures beside it.

A report reads files only (the run's Parquet tables and JSON, a collected sweep, a plan's
``plan.json``/``plan.parquet``, a day plan's ``day_plan.json``): what it shows was computed by
the simulator before, never by simulating again.

- ``inputs``: what PATH is (a run, a collected sweep, a plan, a day plan) and reading it;
- ``shapes``: the shapes of ``summary.json``, ``plan.json`` and ``plan_request.json`` a report
  accepts, and the check that refuses a file naming its first wrong key;
- ``day_plan``: the tolerant reader of ``day_plan.json`` (periods, the three answers);
- ``intervals``: Wilson intervals for a share, Student-t intervals for a mean;
- ``answer``: the answer paragraph: what to buy, what it costs, how sure;
- ``traffic``: the workload: length histograms, the four traffic patterns, arrivals per
  minute;
- ``kv_use``: KV-cache use and running requests over time, from ``steps.parquet``;
- ``load``: latency percentiles against load per replica, the knee and the operating point,
  a row of panels per candidate;
- ``capacity``: a capacity plan's (``plan.solve=max_rate``) answer, each SLO statistic against
  load with the capacity found, and the rate multiples tried;
- ``costs``: cost per candidate with its interval, cheapest first (a sweep's within each
  traffic);
- ``scaling``: the fleet over the day: ``scaling.parquet`` and a day plan's three answers;
- ``faults``: the fleet under faults: replicas up, draining and down over a run with its fault
  events marked (``faults.parquet``), their table by kind, and a summary's ``faults`` block;
- ``assumptions``: the table of what the figures assume (model, GPU, the scheduler and router
  by their config names, step-time model and its measured error, prices with their source,
  versions, commands);
- ``plotting``: seaborn and matplotlib, imported when a figure is drawn (Agg backend, PNG);
- ``document``: the report as blocks, rendered to HTML and Markdown, written atomically;
- ``command``: ``fleetcast report``: the arguments, the sections of each kind of folder.

May import: the basics, ``sim.output.run_files`` (the names of a run folder's files, atomic
writes), ``sim.output.summary_table`` (the number format), ``sim.output.model_error`` (a plan
answer's model-error block in words), ``sim.sweeps.monitor`` (SLO
attainment and the same traffic, as the sweep ranks them), ``sim.plan.slo``,
``sim.plan.replications`` and ``sim.plan.runs``/``sim.plan.rounds`` (a plan folder's SLO
grammar, intervals and run folder names), ``sim.plan.spares`` (an answer's spares in words, as
the plan prints them), and the ``report`` extra (seaborn, matplotlib,
pandas). Never ``sim.engine`` or ``sim.fleet``: reports read what runs wrote.
"""
