"""Step-time models: how long one engine step takes, from the shape of its plan alone.

Every model maps the four numbers of a ``StepPlan``'s shape (prefill tokens P, decoding
sequences D, prefill attention Ap, decode context Ad; see ``sim.scheduler.plan``) to seconds. It
never looks at the clock or at global state, so the same plan always costs the same time.
"""

from sim.step_time.base import StepTimeModel

__all__ = ["StepTimeModel"]
