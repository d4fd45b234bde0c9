"""The ``fleetcast`` command (also ``python -m sim``): its commands dispatched (``main``), one
run, a sweep's jobs, Hydra's runner (``run_hydra``). The text of ``fleetcast --help`` is
``help``'s, with the command names, each command's help as plain text and a misspelled command
refused (``help``); where a command's files go, checked before anything runs (``folders``); the
commands ``fleetcast memory`` (``memory``) and ``fleetcast bench`` (``bench``). The other
commands live with what they do (``sim.plan.planner``, ``sim.report.command``, ...).

May import: anything (the command is the outermost layer, with ``sim.run``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from sim.cli.folders import check_folder, check_output_dir, given_output_dir, hydra_dirs
from sim.cli.help import COMMANDS, check_command, print_help
from sim.config.compose import HYDRA_OVERRIDE, check_overrides, to_dict
from sim.errors import ConfigError, require
from sim.output.summary_table import format_summary
from sim.resources import config_dir
from sim.startup import STARTUP
from sim.startup.compose_cache import ComposeCache, ComposeFailed

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from sim.startup.compose_cache import ComposedRun

# what `pip install 'fleetcast[calibrate]'` adds (pyproject.toml)
CALIBRATE_EXTRA = ("scipy", "pandas")


def _fail(err: ConfigError) -> NoReturn:
    print(f"error: {err}", file=sys.stderr)
    sys.exit(2)


def _run_task(cfg: DictConfig) -> dict[str, Any] | None:
    # imported here: Hydra (~120 ms of CPU), only for runs through its runner
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hydra_cfg = HydraConfig.get()
    runtime = hydra_cfg.runtime
    if str(hydra_cfg.sweeper.get("_target_", "")).endswith(".FleetcastPlanSweeper"):
        # a simulation of `fleetcast plan`: its summary goes back to the plan
        # imported here: the simulator (~290 ms of CPU), only for a plan's jobs
        from sim.plan.runs import simulate_job

        return simulate_job(to_dict(cfg), Path(runtime.output_dir))
    if hydra_cfg.mode == RunMode.MULTIRUN:
        # Every job has its own folder (output_dir=... became the sweep folder).
        _sweep_job(cfg, Path(runtime.output_dir), dict(runtime.choices))
        return None
    output_dir = Path(cfg.get("output_dir") or runtime.output_dir)
    try:
        _simulate_into(cfg, output_dir, dict(runtime.choices))
    except ConfigError as err:
        _fail(err)
    return None


def _simulate_into(
    cfg: DictConfig | dict[str, Any], output_dir: Path, choices: dict[str, Any]
) -> None:
    # imported here: the simulator (~290 ms of CPU), never needed by --help, report, compare
    from sim.run import simulate

    STARTUP.end()

    # (the folder's earlier run and a killed run's temporaries are removed by the run, once
    # it holds the folder's lock: sim.output.run_files.RunFolder)
    result = simulate(cfg, output_dir)
    print(
        format_summary(
            result.summary, result.config, str(output_dir), choices, result.rejection_texts
        )
    )


def _single_run(cache: ComposeCache, composed: ComposedRun | None) -> None:
    """One simulation, its config composed once (``composed``, where the same command was
    composed before; else now, by Hydra).

    Hydra's own runner composes the config twice (once to learn the run mode) and sets up
    logging and a job runtime that a simulation does not use, a third of a second before the
    first event. This path composes once, and records what Hydra would in ``.hydra/`` (the job's
    config, the Hydra config with the group choices, the overrides), so ``fleetcast collect``
    reads these run folders like any other. The same command run again reads its composed
    config back from disk, without Hydra (``sim.startup.compose_cache``). Runs that ask Hydra
    for more (``hydra.*`` overrides, flags) go through Hydra's runner.
    """
    try:
        if composed is None:  # (a command found in the cache passed these checks before)
            check_overrides(cache.overrides)
        check_output_dir(cache.overrides)
    except ConfigError as err:
        _fail(err)
    if composed is None:
        try:
            composed = cache.compose()
        except (ComposeFailed, ConfigError) as err:  # Hydra's refusal, an interpolation's
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)
    output_dir = Path(composed.config.get("output_dir") or composed.run_folder())
    try:
        if "${" in (given_output_dir(cache.overrides) or ""):
            check_folder(str(output_dir))  # resolved only now
        _simulate_into(composed.config, output_dir, composed.choices)
    except ConfigError as err:
        _fail(err)
    # imported here: OmegaConf (~56 ms of CPU), never needed by --help or report
    from omegaconf import OmegaConf

    record = output_dir / ".hydra"
    record.mkdir(exist_ok=True)
    for name, text in composed.texts.items():  # config.yaml, hydra.yaml
        (record / name).write_text(text)
    (record / "overrides.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(cache.overrides)))
    cache.keep(composed)  # for the next run of this command, now that this one has its files


def _sweep_job(cfg: DictConfig, job_dir: Path, choices: dict[str, Any]) -> None:
    """One job of a sweep: skipped when its folder already holds this exact run (resume); a
    bad configuration is recorded in error.txt and does not stop the other jobs."""
    # imported here: run folders, with OmegaConf (~50 ms of CPU), only for a sweep's jobs
    from sim.output.run_files import ERROR_FILE
    from sim.sweeps.resume import job_status

    try:
        config = to_dict(cfg)  # (a value that cannot be resolved is this job's bad input)
        if job_status(job_dir, config) == "complete":
            # one write per line: parallel jobs share stdout, and print() writes the text and
            # the newline separately, so two jobs' lines could interleave
            sys.stdout.write(f"{job_dir}: complete, skipped\n")
            sys.stdout.flush()
            return
        (job_dir / ERROR_FILE).unlink(missing_ok=True)
        _simulate_into(config, job_dir, choices)
    except ConfigError as err:
        (job_dir / ERROR_FILE).write_text(f"error: {err}\n")
        print(f"error: {err}", file=sys.stderr)
    except Exception as err:
        (job_dir / ERROR_FILE).write_text(f"{type(err).__name__}: {err}\n")
        raise


# The exit status of a command whose reader closed its output early (`fleetcast ... | head`):
# 128 + SIGPIPE's number, what the shell reports for any command a closed pipe stops (`yes |
# head`), so a script with `set -o pipefail` sees a cut-short command as it sees any other
# (a plan whose table was cut off may not have been printed whole; 0 would say it was)
BROKEN_PIPE_STATUS = 128 + 13


def main(argv: list[str] | None = None) -> None:
    """The ``fleetcast`` command (``argv``: its arguments; None: this process's own)."""
    try:
        try:
            _main(argv)
        finally:
            sys.stdout.flush()  # (here, not at the interpreter's exit, where it cannot be caught)
    except (BrokenPipeError, ReaderGone):
        # The reader has gone: what is left to print has nowhere to go, and Python would print a
        # traceback, then fail again flushing stdout at exit; stdout points at devnull instead.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(BROKEN_PIPE_STATUS)


def _main(argv: list[str] | None) -> None:
    as_command = argv is None  # the process's own command line: it ends with the run
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        check_command(argv[0] if argv else None)
        if print_help(argv, _command):
            return
    except ConfigError as err:
        _fail(err)
    command = argv[0] if argv and argv[0] in COMMANDS else "run"
    if command not in ("run", "memory"):  # commands that run for long, or run many
        _command(argv)
        return
    STARTUP.begin(freeze=as_command)
    try:
        _command(argv)
    finally:
        STARTUP.release()


def _command(argv: list[str]) -> None:
    """Run the command ``argv``."""
    command = argv.pop(0) if argv and argv[0] in COMMANDS else "run"
    if command == "collect":
        # imported here: this command's modules, for it only (~160 ms of CPU)
        from sim.sweeps.collect import main as collect_main

        sys.exit(collect_main(argv))
    if command == "calibrate":
        try:
            # imported here: this command's modules, for it only (~460 ms of CPU; extras)
            from sim.calibration.calibrate import main as calibrate_main

            sys.exit(calibrate_main(argv))
        except ModuleNotFoundError as err:  # the calibrate extra is not installed
            missing = (err.name or "").split(".")[0]
            if missing not in CALIBRATE_EXTRA:
                raise
            print(
                f"error: fleetcast calibrate needs {missing}: pip install 'fleetcast[calibrate]'",
                file=sys.stderr,
            )
            sys.exit(2)
    if command == "plan":
        from sim.plan import INTERRUPTED_STATUS, STOPPED_BEFORE_RUNS  # (imports nothing)

        try:
            # imported here: this command's modules, for it only (~200 ms of CPU)
            from sim.plan.planner import main as plan_main

            status = plan_main(argv, run_hydra)
        except KeyboardInterrupt:  # (where the plan's own lines do not: its imports, say)
            print(STOPPED_BEFORE_RUNS, file=sys.stderr)
            status = INTERRUPTED_STATUS
        sys.exit(status)
    if command == "report":
        # imported here: this command's modules, for it only (~10 ms of CPU; its figures' ~590 ms)
        from sim.report.command import main as report_main

        sys.exit(report_main(argv))
    if command == "profile":
        # imported here: this command's modules, for it only (~100 ms of CPU)
        from sim.calibration.profiler import main as profile_main

        sys.exit(profile_main(argv))
    if command == "model":
        # imported here: this command's modules, for it only (~10 ms of CPU)
        from sim.catalog.model_import import main as model_main

        sys.exit(model_main(argv))
    if command == "bench":
        from sim.cli.bench import main as bench_main

        try:
            sys.exit(bench_main(argv))
        except ConfigError as err:
            _fail(err)
    if command == "compare":
        # imported here: this command's modules, for it only (~170 ms of CPU)
        from sim.harness.compare import main as compare_main

        sys.exit(compare_main(argv))
    # one run that Hydra's runner is not asked for (no flags, no hydra.* overrides)
    single = command == "run" and not any(a.startswith(("-", *HYDRA_OVERRIDE)) for a in argv)
    if single:
        cache = ComposeCache(argv)
        _single_run(cache, cache.read())
        return
    try:
        check_overrides(_overrides(argv))
        check_output_dir(argv)
        folders = hydra_dirs(argv) if command != "memory" else []
    except ConfigError as err:
        _fail(err)
    if command == "memory":
        from sim.cli.memory import main as memory_main

        try:
            memory_main(argv, run_hydra)
        except ConfigError as err:
            _fail(err)
        return
    STARTUP.end()  # a sweep's launcher and monitor run for as long as the sweep
    run_hydra(argv + folders)


def _overrides(argv: list[str]) -> list[str]:
    """The overrides of a Hydra command line, its flags and their values (``--cfg job``) left
    out, as Hydra's own parser reads them (it ends a command line it cannot read with its
    usage, exit status 2, as Hydra would)."""
    # (Hydra's parser is not public API; it is the only definition of which flags take a
    # value, and the runner this command line goes to parses it the same way)
    from hydra._internal.utils import get_args_parser

    args = get_args_parser().parse_args(argv)
    modes = [f"--{m}" for m in ("run", "multirun", "cfg", "info") if getattr(args, m)]
    require(len(modes) <= 1, "flags", " ".join(modes), "give one of them (Hydra runs one mode)")
    return list(args.overrides)


def run_hydra(argv: list[str]) -> None:
    """Run Hydra's runner (one run, or a multirun with ``-m``) on the command line ``argv``,
    each job's task ``_run_task``."""
    # imported here: Hydra (~120 ms of CPU), only for runs through its runner
    import hydra

    saved, saved_stdout = sys.argv, sys.stdout
    sys.argv = [sys.argv[0], *argv]
    sys.stdout = _ReaderWatch(saved_stdout)
    try:
        hydra.main(config_path=str(config_dir()), config_name="config", version_base="1.3")(
            _run_task
        )()
    finally:
        sys.argv, sys.stdout = saved, saved_stdout


class ReaderGone(BaseException):
    """stdout's reader closed it (``fleetcast --cfg job | head``), under Hydra's runner: a
    BaseException, as Hydra prints any Exception of its task or its ``--cfg`` as a traceback
    (a BrokenPipeError too) and exits 1; this one passes to ``main``, which ends quietly."""


class _ReaderWatch:
    """``stream`` (stdout) whose BrokenPipeError is raised as ``ReaderGone``."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return int(self._stream.write(text))
        except BrokenPipeError as err:
            raise ReaderGone from err

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError as err:
            raise ReaderGone from err

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, ...: the stream's
        return getattr(self._stream, name)
