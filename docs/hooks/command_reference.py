"""reference/commands.md's sections, generated from the commands' own ``--help`` at build.

Each command of ``sim.cli.COMMANDS`` gets a section holding what ``fleetcast COMMAND --help``
prints, run from this checkout, so the page says what the code accepts today. ``run`` and
``memory`` take config overrides (the config reference lists them), so their sections open with
a sentence saying so before their help. A ``--help`` that fails or prints a traceback stops the
build.

An MkDocs hook: ``on_page_markdown`` replaces ``MARKER`` in a page with ``render()``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- generated: command reference -->"
HELP_WIDTH = "100"  # argparse wraps to $COLUMNS: one width, whatever the terminal
HELP_TIMEOUT_S = 120  # a --help that has not answered by then is a hang, not a slow machine
# the commands whose arguments are config overrides: a sentence pointing at the config reference
OVERRIDE_COMMANDS = {
    "run": "simulate one configuration: `fleetcast [run] [KEY=VALUE ...]`. Every key of the "
    "[config reference](config.md) can be set; `-m` with comma-separated values runs a sweep "
    "(one run per combination, on the local cores by default; see [sweeps](../how-to/sweeps.md)).",
    "memory": "print one replica's memory plan (weights, reserve, KV blocks and tokens, how many "
    "requests fit at once) for the same overrides a run takes: `fleetcast memory [KEY=VALUE ...]` "
    "(`memory.request_tokens=N`: how many requests of N tokens fit).",
}
# a command whose help is its subcommand's
HELP_ARGV = {"model": ["model", "import", "--help"]}


class HelpFailed(Exception):
    """A command's ``--help`` exited with an error or printed a traceback."""


def command_help(command: str) -> str:
    """What ``fleetcast COMMAND --help`` prints (``command`` '': the top-level usage)."""
    argv = HELP_ARGV.get(command, [command, "--help"] if command else ["--help"])
    env = {**os.environ, "COLUMNS": HELP_WIDTH, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "sim", *argv],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=HELP_TIMEOUT_S,
    )
    text = done.stdout + done.stderr
    if done.returncode != 0 or "Traceback" in text:
        raise HelpFailed(f"fleetcast {' '.join(argv)} (exit {done.returncode}):\n{text}")
    return text.rstrip()


def commands() -> tuple[str, ...]:
    from sim.cli import COMMANDS

    return tuple(COMMANDS)


def render() -> str:
    """The generated part of reference/commands.md."""
    names = commands()
    with ThreadPoolExecutor(max_workers=4) as pool:
        helps = dict(zip(["", *names], pool.map(command_help, ["", *names]), strict=True))
    out = ["## fleetcast", "", "`fleetcast --help`:", "", "```text", helps[""], "```", ""]
    for name in names:
        shown = " ".join(HELP_ARGV.get(name, [name])[:2])
        out += [f"## {name}", ""]
        if name in OVERRIDE_COMMANDS:
            out += [OVERRIDE_COMMANDS[name], ""]
        out += [f"`fleetcast {shown} --help`:", "", "```text", helps[name], "```", ""]
    return "\n".join(out)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """The MkDocs hook: the marker replaced by the generated sections."""
    return markdown.replace(MARKER, render()) if MARKER in markdown else markdown
