"""What a run produces: metric rows, the Parquet tables, the summary, cost, and the run's files.

- ``metrics``: the step rows replicas append during the run (typed column buffers);
- ``results``: the requests and steps tables (explicit Arrow schemas) and the summary;
- ``cost``: what the fleet costs, and the unit costs derived from the run's rates;
- ``summary_table``: the summary as the table ``fleetcast`` prints;
- ``run_files``: a run folder's files, named once and written atomically, summary.json last.

May import: ``sim.engine`` (a request's fields), ``sim.catalog`` (the GPU's price),
``sim.config``, ``sim.errors``, ``sim.arrow_numpy``. Never ``sim.fleet``; reports (to come) read
what this package writes, never the other way round.
"""
