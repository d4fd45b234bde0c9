"""The command line's names: the commands, their help as plain text, and a first word that is
a misspelled command refused by the nearest name (``sim.cli`` is the command itself)."""

from __future__ import annotations

import contextlib
import difflib
import io
import re
import sys
import textwrap
from collections.abc import Callable

from sim.errors import ConfigError
from sim.resources import config_dir

# the first word of a command line that names a command (any other starts a run)
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
# what `fleetcast --help` prints (its reStructuredText markup taken out)
USAGE = """The ``fleetcast`` command (also ``python -m sim``).

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


def print_help(argv: list[str], run_command: Callable[[list[str]], None]) -> bool:
    """Print the help ``argv`` asks for (``--help``, ``-h``, ``help [COMMAND]``), as plain text;
    False when it asks for none. A command's own help (its argparse parser's) is what
    ``run_command`` prints for ``argv``, its reStructuredText markup taken out
    (``plain_text``). ConfigError for ``help`` of a command there is not."""
    if argv and argv[0] == "help" and argv[1:2] and argv[1] not in HELP_FLAGS:
        if argv[1] not in COMMANDS:  # `fleetcast help reprot`
            raise unknown_command(argv[1])
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
            run_command(list(argv))
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


def check_command(first: str | None) -> None:
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
    if nearest_command(first) is not None:
        raise unknown_command(first)


def nearest_command(word: str) -> str | None:
    """The command ``word`` is a misspelling of, None where it is close to none."""
    near = difflib.get_close_matches(word.lower(), COMMANDS, n=1, cutoff=COMMAND_CUTOFF)
    return near[0] if near else None


def unknown_command(word: str) -> ConfigError:
    """``word`` refused as a command, naming the nearest one where there is one."""
    near = nearest_command(word)
    guess = f"; did you mean {near}?" if near is not None else ""
    return ConfigError(
        "command", word, f"unknown command{guess} (fleetcast --help lists the commands)"
    )
