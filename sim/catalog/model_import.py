"""``fleetcast model import CONFIG_JSON``: a Hugging Face config.json as a catalog YAML.

The YAML is in the style of ``configs/model/*.yaml``: one field a line, each with a comment
naming the config.json key (or the count) it came from, and ``sources:`` naming the file. The
numbers are ``sim.catalog.hf_config``'s, so the entry equals what ``model=hf
model.config_path=CONFIG_JSON`` runs with. Saved as ``configs/model/NAME.yaml``, it is selected
with ``model=NAME`` and no longer reads the file.

It writes to stdout, or to ``--output FILE``, which must not exist yet (a catalog entry someone
edited by hand is not overwritten).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from sim.catalog.hf_config import fields_and_keys
from sim.errors import ConfigError, require

COMMENT_COLUMN = 30  # where the comments start, as in configs/model/*.yaml


def catalog_yaml(config_json: str, name: str | None = None) -> str:
    """The catalog YAML text of the config.json at ``config_json`` (a path or ``shipped:NAME``)."""
    fields, keys = fields_and_keys(config_json, name=name)
    kind = (
        f"mixture of experts, {fields['experts_per_token']} of {fields['num_experts']} experts "
        "per token"
        if fields["num_experts"] > 1
        else "dense"
    )
    lines = [
        f"# Model catalog entry: {fields['name']} ({kind}).",
        f"# Imported by `fleetcast model import {config_json}`;",
        "# saved as configs/model/NAME.yaml it is selected with `model=NAME`.",
    ]
    for field, value in fields.items():
        if field == "sources":
            continue
        line = f"{field}: {_scalar(value)}"
        if field in keys:
            line = line.ljust(max(COMMENT_COLUMN, len(line) + 2)) + f"# {keys[field]}"
        lines.append(line)
    lines.append("sources:")
    lines.append(f"  config_json: {_scalar(config_json)}")
    return "\n".join(lines) + "\n"


def _scalar(value: Any) -> str:
    """A YAML scalar: numbers as written, text quoted (JSON strings are valid YAML)."""
    return json.dumps(value) if isinstance(value, str) else str(value)


def main(argv: list[str]) -> int:
    """``fleetcast model import CONFIG_JSON [--name ORG/NAME] [--output FILE]``; 0 on
    success, 2 on bad input."""
    parser = argparse.ArgumentParser(
        prog="fleetcast model",
        description="Write a catalog entry (configs/model/*.yaml) from a Hugging Face "
        "config.json: shapes, exact parameter counts, KV and MoE fields.",
    )
    sub = parser.add_subparsers(dest="action", required=True)
    do_import = sub.add_parser("import", help="a config.json as a catalog YAML")
    do_import.add_argument("config_json", metavar="CONFIG_JSON", help="a path or shipped:NAME")
    do_import.add_argument("--name", metavar="ORG/NAME", help="default: the config's name")
    do_import.add_argument("--output", metavar="FILE", help="default: stdout")
    args = parser.parse_args(argv)
    try:
        output = Path(args.output) if args.output is not None else None
        if output is not None:
            require(not output.exists(), "output", args.output, "exists; not overwritten")
        text = catalog_yaml(args.config_json, args.name)
        if output is None:
            sys.stdout.write(text)
            return 0
        output.parent.mkdir(parents=True, exist_ok=True)
        with output.open("x") as out:  # "x": a file that appeared meanwhile is not clobbered
            out.write(text)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"error: output={args.output!r}: cannot be written ({err})", file=sys.stderr)
        return 2
    print(f"wrote {output}", file=sys.stderr)
    return 0
