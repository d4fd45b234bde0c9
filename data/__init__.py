"""The data Fleetcast ships: traces, step-time profiles and kernel tables, with their licences.

Nothing here is Python: this file makes the folder travel inside the package as ``sim.data``
(pyproject.toml maps it). Configs name these files ``shipped:<path under data/>``
(``sim.resources``).
"""
