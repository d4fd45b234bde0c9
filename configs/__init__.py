"""Fleetcast's Hydra configs, one folder per swappable concern (docs/reference/config.md lists
them).

Nothing here is Python: this file makes the folder travel inside the package as ``sim.configs``
(pyproject.toml maps it), so an installed Fleetcast finds its configs without a checkout
(``sim.resources.config_dir``).
"""
