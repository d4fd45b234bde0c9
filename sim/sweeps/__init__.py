"""Many runs of one command: watching a sweep, resuming it, and collecting it into a dataset.

- ``monitor``: the Hydra callback that shows progress and ranks SLO-meeting configurations,
  each against those offered the same traffic;
- ``resume``: whether a job's folder already holds its finished run;
- ``runs``: finding and reading run folders;
- ``collect``: ``fleetcast collect``, a sweep as one Parquet dataset.

May import: ``sim.output.run_files`` (the files of a run folder), ``sim.config``, Hydra. Sweeps
read run folders; they never import the engine or the fleet.
"""
