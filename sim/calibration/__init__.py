"""Step-time profiles from measurements, offline.

- ``calibrate``: ``fleetcast calibrate``, the command (where a profile may be written);
- ``step_fit``: a profile fitted to a per-step CSV (NNLS on the linear contract);
- ``kernels``: a profile built from per-kernel timing tables;
- ``bench_runs``: the measured runs of benchmark files, each composed into the config that
  replays it as its harness ran it, with the figures it is scored on and the held-out split;
- ``bench_fit``: the roofline's global terms fitted to those runs;
- ``fitting``: what every fit shares (held-out rows, their error, the sources' checksums);
- ``profiler``: ``fleetcast profile``, timing engine steps of a catalog model with PyTorch;
- ``profiler_model``: the random-weight transformer the profiler times.

May import: ``sim.engine`` (the step shape, profiles), ``sim.catalog``, ``sim.config``,
``sim.errors``, ``sim.resources``, ``sim.harness`` and ``sim.run`` (``bench_fit`` reads
benchmark files and simulates them), ``sim.output.model_error`` (a bench profile's own
held-out error band), and the ``calibrate`` / ``profile`` extras (SciPy, pandas,
PyTorch), only inside this package.
"""
