"""Step-time models: how long one engine step takes, from the step's shape alone.

Every model maps a ``StepShape`` (prefill tokens P, decoding sequences D, prefill attention Ap,
decode context Ad; ``sim.engine.step_shape``) to seconds. It never looks at the clock or at global
state, so the same shape always costs the same time. One file per model: ``constant`` (theory and
tests), ``linear`` (the contract formula of docs/reference/config.md), ``roofline`` (first
principles from the catalog) and ``calibrated`` (fitted to measured kernels; its profiles in
``profile``).
"""

from sim.engine.step_time.base import StepTimeModel

__all__ = ["StepTimeModel"]
