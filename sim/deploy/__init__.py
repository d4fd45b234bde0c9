"""What a run deploys, built from its checked config: the parts the composition root
(``sim.run``) puts together.

- ``engines``: one engine configuration's step-time models, KV caches and schedulers (a run
  has one, an autoscaled run one per configuration, a disaggregated run one per pool);
- ``disaggregated``: a disaggregated fleet's two pools, their engines, the KV link between
  them, the decode router, and the summary's ``disaggregation`` block.

May import: ``sim.config``, ``sim.catalog``, ``sim.engine``, ``sim.fleet``, ``sim.output``
(cost, results, step totals), ``sim.spec_decode``: it builds what those describe, and is
imported only by ``sim.run``.
"""
