"""Workload generation: when requests arrive and how long they are (see ``source.py``)."""

from sim.workload.source import Workload, build_workload

__all__ = ["Workload", "build_workload"]
