"""Measured benchmark runs: reading the result files of serving benchmarks, and comparing a
simulated run with one.

- ``results``: ``MeasuredRun``, one measured run, with each metric's definition in its tool's
  terms;
- ``parsing``: what every reader shares (reading a file, keys checked with one-line errors);
- ``vllm_bench``: vLLM ``bench serve`` / ``benchmark_serving.py`` JSON;
- ``sglang_bench``: SGLang ``bench_serving`` JSON lines;
- ``guidellm_report``: GuideLLM reports, JSON or YAML;
- ``aiperf_export``: AIPerf ``profile_export_aiperf.json`` and its per-request JSON lines;
- ``formats``: which harness wrote a file (from its content), and choosing one of its runs;
- ``replay``: a measured run as the simulated benchmark that reproduces it (the harness's
  client, load and lengths, the engine's scheduler);
- ``simulated``: a simulated run's figures in a harness's definitions;
- ``compare``: ``fleetcast compare RUN_DIR FILE``, the two side by side;
- ``bench``: ``fleetcast bench``'s harness flags (onto ``workload=bench``) and its report in a
  harness's names and definitions (``sim.cli`` runs the simulation);
- ``mlperf``: MLPerf Inference Server results and each benchmark's bounds and dataset, the
  shipped tables (``data/mlperf/``) read and checked;
- ``mlperf_configs``: an MLPerf result as Fleetcast config names, or the reasons it cannot be
  simulated.

May import: the basics (``sim.errors``, ``sim.resources``, ``sim.arrow_numpy``) and
``sim.output.run_files`` (the files of a run folder). A harness file and a run folder are read as
files: nothing here imports the engine or the fleet.
"""
