"""Composing and checking configs: everything between the YAML files and the objects of a run.

- ``compose``: the resolved config outside a Hydra run, group options, overrides checked first;
- ``schema``: every key of every group, its type and bounds (``RunConfig``), checked before a
  run is built;
- ``workload_schema``: the ``workload`` group's shape: lengths and every kind of traffic (part
  of ``RunConfig``);
- ``autoscale``: the ``autoscale`` group's shape (a fleet whose size changes) and the checks
  across its fields;
- ``faults``: the ``faults`` group's shape (failures, maintenance drains, spot reclaims; off
  by default);
- ``speculation``: the ``spec_decode`` group's shape (speculative decoding; off by default);
- ``tiers``: price tiers (``fleet.tiers``, a pool's ``tiers``): the tier names, a mix's
  replica counts resolved against a fleet's size;
- ``validation``: the layer the schema is built from (pydantic, strict), and its errors said in
  one line naming the field and the value;
- ``build``: a ``_target_`` node to its object, options checked against the class's signature;
- ``legacy``: older spellings in run folders (``_target_`` names, shipped paths) made current.

May import: the basics (``sim.errors``, ``sim.rng``, ``sim.resources``, ``sim.arrow_numpy``) and
Hydra/OmegaConf. Nothing here knows what a value means; the packages downstream do.
"""
