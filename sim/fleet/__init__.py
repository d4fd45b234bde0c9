"""The fleet in simulated time: the only package that uses SimPy.

- ``simclock``: events at absolute times, in a fixed order when they coincide;
- ``replica``: one replica's step loop over its engines (one per model it serves);
- ``frontend``: a replica's host queue that streams tokens and takes in requests;
- ``router``: which replica a new request goes to (add one: a class + a YAML file);
- ``cluster``: the replicas behind the router, fed by the workload;
- ``autoscaler``: replicas asked for, provisioned, drained and released as the run goes (a
  metric policy or a schedule);
- ``disaggregation``: prefilled requests' KV moved from a prefill pool to a decode pool
  (room kept, links, transfers, back-pressure);
- ``faults``: replicas that fail, drain for maintenance or are reclaimed: taken down, their
  requests retried or failed, brought back;
- ``admission``: the requests no replica can ever serve, found before the run.

May import: ``sim.engine``, ``sim.workload``, ``sim.output.metrics`` (the step rows a replica
appends), ``sim.output.request_log`` and ``sim.output.step_log`` (where rows go as the run
goes), ``sim.output.scaling`` (the fleet's changes), ``sim.config.autoscale`` (the
autoscaler's settings), ``sim.output.faults`` and ``sim.config.faults`` (the faults' log and
settings), ``sim.errors``. Not the rest of ``sim.output``: summaries are built
after the run, from what the fleet recorded.
"""
