"""Fleetcast: a discrete-event simulator of LLM serving fleets.

The data flows one way: workload -> router -> replica (scheduler <-> KV cache) -> step-time
model -> metric rows -> Parquet. ``sim.run.simulate`` runs one configuration; ``sim.cli`` is
the ``fleetcast`` command.
"""

__version__ = "0.1.0"
