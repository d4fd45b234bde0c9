"""The ``fleetcast`` command (also ``python -m sim``).

    fleetcast [run] [hydra overrides]      simulate one configuration (or sweep with -m)
    fleetcast memory [overrides]           print the memory plan of one replica
    fleetcast collect SWEEP_DIR [--out PATH] [--no-requests]
                                           a sweep's runs as one Parquet dataset
    fleetcast calibrate (--steps CSV | --kernels DIR --c0 S) [overrides] [--backend B]
                        [--out PATH] [--force]
                                           fit a step-time profile (step_time=calibrated);
                                           DIR may be shipped:calibration
    fleetcast calibrate [overrides] --bench FILE [overrides] [--bench FILE ...] [--out PATH]
                                           fit the roofline's terms to measured serving
                                           benchmarks (step_time.profile=PATH)
    fleetcast profile model=NAME --out CSV [--device D] [--dtype T] [--layers N]
                                           time engine steps with PyTorch (the calibrate CSV)
    fleetcast model import CONFIG_JSON [--name ORG/NAME] [--output FILE]
                                           a Hugging Face config.json as a catalog YAML
                                           (or run it directly: model=hf model.config_path=PATH)
    fleetcast compare RUN_DIR FILE [--index N]
                                           a run beside a measured benchmark (vLLM, SGLang,
                                           GuideLLM or AIPerf result file), in its definitions
    fleetcast bench [--harness vllm|sglang|guidellm|aiperf] [--num-prompts N] [--request-rate R|inf]
                    [--burstiness B] [--max-concurrency C] [--num-warmups W]
                    [--ramp-up-strategy linear|exponential]
                    [--ramp-up-start-rps A] [--ramp-up-end-rps B]
                    [--random-input-len I] [--random-output-len O] [overrides]
                                           a benchmark simulated as vllm bench serve runs it,
                                           reported in the harness's metrics
    fleetcast plan [overrides] [plan.slo=[...]] [plan.grid={...}] [plan.KEY=VALUE]
                   [hydra/launcher=... hydra.launcher.KEY=VALUE]
                                           the smallest replica count meeting every SLO per
                                           candidate, with replications; cheapest first
    fleetcast report PATH [--out FILE_STEM] [--title TEXT]
                                           a run, collected sweep, plan or day-plan folder as
                                           PATH/report.html (self-contained) and report.md

``fleetcast COMMAND --help`` (or ``-h``) prints one command's options. Bad input ends with one
line, ``error: field=value: reason``, and exit status 2.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import os
import re
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from sim.config.compose import (
    HYDRA_OVERRIDE,
    check_overrides,
    compose_config,
    to_dict,
    unresolvable_error,
)
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
COMMANDS = (
    "run",
    "memory",
    "collect",
    "calibrate",
    "profile",
    "model",
    "compare",
    "bench",
    "plan",
    "report",
)
USAGE = __doc__
HELP_FLAGS = ("-h", "--help")
HELP_WIDTH = 96  # the width of the help texts (the line length of the code they live in)
RUN_USAGE = """usage: fleetcast [run] [OVERRIDE ...] [-m] [--cfg job] [--hydra-help]

Simulate one configuration and write its run folder (requests.parquet, steps.parquet,
summary.json, config.yaml) and print its summary; with -m (--multirun), a sweep: one run per
combination of the comma-separated values (fleet.replicas=1,2,4), each in a folder of its own.

overrides (Hydra's grammar):
  GROUP=OPTION       pick an option of a config group (model=llama31_70b, scheduler=sglang)
  KEY=VALUE          set a config key (fleet.replicas=8, workload.duration_s=120)
  +KEY=VALUE         add a key the config does not have; ~KEY removes one
  output_dir=PATH    the run's folder (the sweep's with -m); default outputs/DATE/TIME

flags (Hydra's):
  -m, --multirun     sweep every comma-separated value
  --cfg job          print the composed config (with the overrides) instead of running
  --hydra-help       Hydra's own flags

config groups (GROUP=OPTION, each option a file configs/GROUP/OPTION.yaml):
"""
MEMORY_USAGE = """usage: fleetcast memory [OVERRIDE ...] [--cfg job]

The memory plan of one replica: how each GPU's memory splits into weights, the runtime's reserve
and KV cache blocks, by the engine's rule, and how many requests of a few lengths fit at once.
The overrides are a run's (model=..., hardware=..., fleet.tp=..., precision.*, memory.*);
memory.request_tokens=N gives the plan for requests of N tokens only. Nothing is simulated.
--cfg job prints the composed config instead, as a run's --cfg job does.
"""


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
        _check_output_dir(cache.overrides)
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
        if "${" in (_given_output_dir(cache.overrides) or ""):
            _check_folder(str(output_dir))  # resolved only now
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


def _check_output_dir(argv: list[str]) -> None:
    """``output_dir=PATH`` must be a folder this process can write (checked before anything is
    simulated, so a long run does not end in a traceback). A path with an interpolation
    (``${oc.env:RUNS}/x``) is checked once composing has resolved it (``_check_folder``)."""
    given = _given_output_dir(argv)
    if given is not None and "${" not in given:
        _check_folder(given)


def _given_output_dir(argv: list[str]) -> str | None:
    """The ``output_dir=`` of the command line, None where it gives none (or null)."""
    given = [a.partition("=")[2] for a in argv if a.startswith("output_dir=")]
    return given[-1] if given and given[-1] not in ("", "null") else None


def _check_folder(given: str) -> None:
    """Refuse ``output_dir=given`` unless it is, or can be made, a folder this process can
    write."""
    path = Path(os.path.expanduser(given))
    require(not path.exists() or path.is_dir(), "output_dir", given, "is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as err:
        raise ConfigError(
            "output_dir", given, f"cannot be written ({err.strerror or err})"
        ) from None


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


def _hydra_dirs(argv: list[str]) -> list[str]:
    """Point Hydra's own folder at ``output_dir=...``: the run's folder for one run, the sweep
    folder (one subfolder per job) for a multirun. Otherwise Hydra would also create
    ``outputs/DATE/TIME`` beside it."""
    multirun = "-m" in argv or "--multirun" in argv
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    if any(a.startswith(key + "=") for a in argv):
        return []
    given = _given_output_dir(argv)
    if given is not None:
        return [f"{key}={_absolute_folder(given)}"]
    if multirun:  # Hydra's default sweep folder, made absolute
        return [f"{key}={os.path.abspath('multirun')}/${{now:%Y-%m-%d}}/${{now:%H-%M-%S}}"]
    return []


def _absolute_folder(given: str) -> str:
    """``output_dir=given`` as an absolute path: a launcher may run the jobs in another
    directory (Ray workers start in the Ray node's directory, not the caller's), and Hydra
    resolves the job folders there. Its interpolations are resolved first where they need no
    config (``${oc.env:SCRATCH}/sweep``, which may be absolute itself); one that refers to the
    config (``runs/${seed}``) is left for Hydra to resolve, against the caller's directory."""
    if "${" in given:
        # imported here: OmegaConf (~56 ms of CPU), never needed by --help or report
        from omegaconf import OmegaConf
        from omegaconf.errors import InterpolationKeyError, OmegaConfBaseException

        alone = OmegaConf.create({"output_dir": given})
        try:
            given = str(alone.output_dir)
        except InterpolationKeyError:  # a key of the config: Hydra's to resolve
            return given
        except OmegaConfBaseException as err:
            raise unresolvable_error(alone, err) from None
    return os.path.abspath(os.path.expanduser(given))


def _memory(argv: list[str]) -> None:
    """``fleetcast memory [OVERRIDE ...]``: one replica's memory plan. Its overrides are a run's,
    and so is ``--cfg job`` (or ``hydra``, ``all``, with ``--resolve``, ``--package``): the
    composed config, printed by Hydra as for ``fleetcast --cfg job`` with the same overrides.
    Other flags (``-m``: a sweep) have no memory plan: refused in one line."""
    # imported here: the schema, the catalog and Hydra's parser (~90 ms of CPU), for this
    # command only
    from hydra._internal.utils import get_args_parser

    from sim.catalog.deployment import build_deployment
    from sim.catalog.memory import format_plan
    from sim.config.schema import DeploymentConfig

    flags = [a for a in argv if a.startswith("-")]
    if flags:
        args = get_args_parser().parse_args(argv)
        printing = {"--cfg", "-c", "--resolve", "--package", "-p"}
        if args.cfg is None or not set(flags) <= printing:
            _fail(
                ConfigError(
                    "flags",
                    " ".join(flags),
                    "fleetcast memory takes overrides, and --cfg job to print their config",
                )
            )
        run_hydra(argv)  # (Hydra prints the config and runs no task)
        return
    overrides = argv
    cfg = compose_config(overrides)
    try:
        checked = DeploymentConfig.from_config(
            {k: cfg[k] for k in DeploymentConfig.model_fields if k in cfg}
        )
        dep = build_deployment(checked)
    except ConfigError as err:
        _fail(err)
    asked = checked.memory.request_tokens
    if asked is not None:
        lengths = [asked]
    else:
        lengths = [n for n in (512, 2048, 8192, 32768, 131072) if n <= dep.model.max_context_tokens]
    print(
        format_plan(
            dep.memory, dep.model, dep.gpu, dep.weights_precision, dep.kv_precision, lengths
        )
    )


def _bench(argv: list[str]) -> int:
    """``fleetcast bench``: run ``workload=bench`` from the harness flags and print the
    harness's report (``sim.harness.bench``)."""
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
        _check_output_dir(overrides)
        cfg = compose_config(run)
        with tempfile.TemporaryDirectory(prefix="fleetcast_bench_") as scratch:
            folder = Path(folders[-1] if folders else scratch)
            simulate(cfg, folder)
            print(report(read_run(folder), args.harness))
    except ConfigError as err:
        _fail(named_by_flag(err, args))
    if folders:
        print(f"files: {folders[-1]}")
    return 0


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
        _check_command(argv[0] if argv else None)
    except ConfigError as err:
        _fail(err)
    if _help(argv):
        return
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
        sys.exit(_bench(argv))
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
        _check_output_dir(argv)
        folders = _hydra_dirs(argv) if command != "memory" else []
    except ConfigError as err:
        _fail(err)
    if command == "memory":
        _memory(argv)
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


def _help(argv: list[str]) -> bool:
    """Print the help ``argv`` asks for (``--help``, ``-h``, ``help [COMMAND]``), as plain text;
    False when it asks for none. A command's own help (its argparse parser's) is printed as
    the command prints it, its reStructuredText markup taken out (``plain_text``)."""
    if argv and argv[0] == "help" and argv[1:2] and argv[1] not in HELP_FLAGS:
        if argv[1] not in COMMANDS:  # `fleetcast help reprot`
            _fail(_unknown_command(argv[1]))
        argv = [argv[1], "--help"]  # `fleetcast help plan`: the command's help
    elif argv and argv[0] in ("help", *HELP_FLAGS):
        print(plain_text(USAGE))
        return True
    if not any(arg in HELP_FLAGS for arg in argv):
        return False
    command = argv[0] if argv and argv[0] in COMMANDS else "run"
    if command == "run":  # (Hydra's help would print its own banner and the whole config)
        from sim.config.compose import group_options

        groups = {
            p.name: group_options(p.name)
            for p in sorted(config_dir().iterdir())
            if p.is_dir() and p.name != "hydra"  # (Hydra's own: its launchers)
        }
        listed = [
            textwrap.fill(
                f"{group}: {', '.join(options)}",
                HELP_WIDTH,
                initial_indent="  ",
                subsequent_indent="    ",
            )
            for group, options in groups.items()
            if options
        ]
        print(RUN_USAGE + "\n".join(listed))
        return True
    if command == "memory":  # (composed by Hydra's API, which would read --help as an override)
        print(MEMORY_USAGE, end="")
        return True
    printed = io.StringIO()
    status: str | int | None = 0
    with contextlib.redirect_stdout(printed):
        try:
            _command(list(argv))
        except SystemExit as end:  # argparse ends its help so, and each command's main
            status = end.code
    sys.stdout.write(plain_text(printed.getvalue()))
    if status:
        sys.exit(status)
    return True


# reStructuredText's inline literals (``x``) and roles (:mod:`x`), kept in the docstrings that
# double as help for the API documentation; the terminal gets the text inside
_MARKUP = re.compile(r"(?::[a-z]+(?::[a-z]+)?:)?``?([^`\n]+?)``?")


def plain_text(text: str) -> str:
    """``text`` with its reStructuredText inline markup replaced by the text it marks."""
    return _MARKUP.sub(r"\1", text)


# how close a word must be to a command's name to be taken for it, misspelled (difflib's
# ratio: 0.6, its own default, takes one typo in a short name, reprot, plna, memroy)
COMMAND_CUTOFF = 0.6
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


def _check_command(first: str | None) -> None:
    """Refuse a first argument that is a misspelled command, naming the nearest one.

    A run's arguments are Hydra overrides (``key=value``, ``+key=value``, ``~key``,
    ``group@package=option``) and flags (``-m``, ``--cfg job``): each has an ``=`` or starts
    with ``-``, ``+`` or ``~``. A first argument that is a plain word is none of these; when
    it is close to a command's name (and is not a config group's name, an override missing its
    value) it is taken for that command, misspelled. Any other first argument is left to the
    override checks (``sim.config.compose.check_overrides``)."""
    if first in (None, "help", *COMMANDS) or not _WORD.fullmatch(first):
        return
    if (config_dir() / first).is_dir():  # `fleetcast placement`: a group without its option
        return
    if _nearest_command(first) is not None:
        raise _unknown_command(first)


def _nearest_command(word: str) -> str | None:
    """The command ``word`` is a misspelling of, None where it is close to none."""
    near = difflib.get_close_matches(word.lower(), COMMANDS, n=1, cutoff=COMMAND_CUTOFF)
    return near[0] if near else None


def _unknown_command(word: str) -> ConfigError:
    """``word`` refused as a command, naming the nearest one where there is one."""
    near = _nearest_command(word)
    guess = f"; did you mean {near}?" if near is not None else ""
    return ConfigError(
        "command", word, f"unknown command{guess} (fleetcast --help lists the commands)"
    )


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
