"""Step-time profiles from measurements, offline.

- ``calibrate``: ``fleetcast calibrate``, fitting a profile from a per-step CSV or kernel tables;
- ``profiler``: ``fleetcast profile``, timing engine steps of a catalog model with PyTorch;
- ``profiler_model``: the random-weight transformer the profiler times.

May import: ``sim.engine`` (the step shape, profiles), ``sim.catalog``, ``sim.config``,
``sim.errors``, ``sim.resources``, and the ``calibrate`` / ``profile`` extras (SciPy, pandas,
PyTorch), only inside this package.
"""
