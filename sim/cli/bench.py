"""``fleetcast bench``: ``workload=bench`` run from a harness's flags, reported as that harness
reports (``sim.harness.bench``)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from sim.cli.folders import check_output_dir
from sim.config.compose import check_overrides, compose_config
from sim.errors import ConfigError


def main(argv: list[str]) -> int:
    """``fleetcast bench``: run ``workload=bench`` from the harness flags and print the
    harness's report (``sim.harness.bench``); ConfigError for bad input, named by its flag where
    a flag set it."""
    # imported here: the harness and the simulator (~290 ms of CPU), for this command only
    from sim.harness.bench import named_by_flag, overrides_from, parser, report
    from sim.harness.simulated import read_run
    from sim.run import simulate

    args, overrides = parser().parse_known_args(argv)
    folders = [o.split("=", 1)[1] for o in overrides if o.startswith("output_dir=")]
    given = [o for o in overrides if not o.startswith("output_dir=")]
    try:
        # the user's overrides checked with the flags' (workload=bench and its keys): a key of
        # the bench workload is known only beside them
        run = [*given, *overrides_from(args)]
        check_overrides(run)
        check_output_dir(overrides)
        cfg = compose_config(run)
        with tempfile.TemporaryDirectory(prefix="fleetcast_bench_") as scratch:
            folder = Path(folders[-1] if folders else scratch)
            simulate(cfg, folder)
            print(report(read_run(folder), args.harness))
    except ConfigError as err:
        raise named_by_flag(err, args) from None
    if folders:
        print(f"files: {folders[-1]}")
    return 0
