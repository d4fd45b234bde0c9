"""Composing and checking configs: everything between the YAML files and the objects of a run.

- ``compose``: the resolved config outside a Hydra run, group options, overrides checked first;
- ``build``: a ``_target_`` node to its object, options checked against the class;
- ``params``: reading one value, its type and range checked, errors naming the field;
- ``legacy``: older spellings in run folders (``_target_`` names, shipped paths) made current.

May import: the basics (``sim.errors``, ``sim.rng``, ``sim.resources``, ``sim.arrow_numpy``) and
Hydra/OmegaConf. Nothing here knows what a value means; the packages downstream do.
"""
