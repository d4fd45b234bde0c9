"""What a run produces: metric rows, the Parquet tables, the summary, cost, and the run's files.

- ``metrics``: the step rows replicas append during the run (typed column buffers);
- ``request_log``: request rows leaving in issue order as requests end;
- ``step_log``: step rows taken from the replicas as they grow, written whole, per time bucket
  or not at all, and summed up for the summary;
- ``tables``: where rows go: memory, or a Parquet file a row group at a time (and a spill for
  rows that arrive out of order);
- ``results``: the requests table (an explicit Arrow schema) and the summary;
- ``stability``: the verdict on whether the fleet kept up (``stable``, ``near_saturation``,
  ``unstable``) and its evidence, from the request times;
- ``cost``: what the fleet costs, and the unit costs derived from the run's rates;
- ``scaling``: an autoscaled fleet's changes (``scaling.parquet``) and their integrals, the
  bill as GPUs x time;
- ``model_error``: the step-time model's error band of a class of deployment, measured on
  validation runs (``data/model_error/bands.csv``), for plans and summaries;
- ``faults``: a fleet with faults: its events (``faults.parquet``), availability, degraded
  periods and the summary's ``faults`` block;
- ``summary_table``: the summary as the table ``fleetcast`` prints;
- ``run_files``: a run folder's files, named once and written atomically, summary.json last.

May import: ``sim.engine`` (a request's fields), ``sim.catalog`` (the GPU's price),
``sim.config``, ``sim.errors``, ``sim.arrow_numpy``. Never ``sim.fleet``; reports
(``sim.report``) read what this package writes, never the other way round.
"""
