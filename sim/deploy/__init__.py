"""What a run deploys, built from its checked config: the fleet's shape, the one seam through
which the composition root (``sim.run``) builds, runs and sums up any fleet.

- ``shape``: the interface every fleet shape implements (what it places, which requests it can
  serve, its replicas' engines, how it admits and routes, what it connects to the running
  cluster, how it is priced, what it adds to the summary and the run folder);
- ``shapes``: the registry: every shape, and the one a checked config asks for;
- ``fixed``: a fixed fleet (``fleet.replicas`` replicas for the whole run), every run's shape
  unless its config asks for another;
- ``autoscaled``: an autoscaled fleet (``autoscale.policy``): its engine configurations, the
  autoscaler, the summary's ``autoscale.engines`` and ``scaling.parquet``;
- ``disaggregated``: a disaggregated fleet (``placement=disaggregated``): its two pools, their
  engines, the KV link between them, the decode router, and the summary's ``disaggregation``
  block;
- ``faulty``: not a shape but a wrapper around the one picked (``faults.*``): replicas that
  fail, drain for maintenance or are reclaimed, the summary's ``faults`` block and
  ``faults.parquet``;
- ``tiers``: a fleet bought at price tiers (``fleet.tiers``, a pool's ``tiers``): its
  replicas grouped by tier, each at its tier's price, and the cost block's ``per_tier``;
- ``engines``: one engine configuration's step-time models, KV caches and schedulers (a run has
  one, an autoscaled run one per configuration, a disaggregated run one per pool);
- ``speculation``: speculative decoding for an engine configuration (``spec_decode.*``): the
  drafter's memory and time, each engine's acceptance draws, the summary's ``spec_decode``
  block (the engine side is ``sim.engine.speculation``, the config's ``sim.config.speculation``).

May import: ``sim.config``, ``sim.catalog``, ``sim.engine``, ``sim.fleet``, ``sim.output``
(cost, results, step totals, run files' names) and ``sim.workload.source`` (the workload a
fleet checks it can serve): it builds what those describe, and is imported only by ``sim.run``.
"""
