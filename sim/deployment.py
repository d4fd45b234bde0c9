"""What one replica is: a model on ``tp`` GPUs of one type, at given precisions, with its
memory plan. Built once per run from the config and handed to the step-time model."""

from __future__ import annotations

from dataclasses import dataclass

from sim.hardware import GPU
from sim.memory import MemoryPlan
from sim.model import ModelSpec


@dataclass(frozen=True, slots=True)
class Deployment:
    model: ModelSpec
    gpu: GPU
    weights_precision: str
    kv_precision: str
    tp: int
    memory: MemoryPlan
