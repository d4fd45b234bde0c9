"""reference/config.md's tables, generated from ``configs/`` and the config's schema at build.

Every option file of every config group gives one table: each key (dotted, as an override names
it), its default in that file, its unit (read off the key's name: Fleetcast puts units in
names, ``_s`` seconds, ``_gib`` GiB, ...) and its meaning (the YAML comment on or above the
key). Keys the schema (``sim.config.schema.RunConfig``, ``sim.plan.planner.PlanConfig``) accepts
but no shipped option sets follow in a table of their own, with the schema's default and the
comment beside the field. So the page lists every key the code knows and nothing else, and it
cannot go stale: it is written from the files each time the site is built.

An MkDocs hook: ``on_page_markdown`` replaces ``MARKER`` in a page with ``render()``.
"""

from __future__ import annotations

import inspect
import io
import re
import textwrap
import tokenize
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIGS = REPO_ROOT / "configs"
MARKER = "<!-- generated: config reference -->"
# folders of configs/ that hold no keys of a run: Hydra's own settings, and experiments (each a
# set of overrides of the other groups, listed by what it asks)
NOT_GROUPS = ("hydra", "experiment")
# mappings whose keys are data (a GPU's name, a figure's name), not config keys: one row each
DATA_MAPPINGS = ("sources", "prices", "grid", "settings", "engines", "autoscale")
MAPPING_ITEM = "<name>"  # how a data mapping's key is written in a dotted key

# the unit a key's name ends with (its last part, or the part's end after an underscore),
# checked in this order
UNITS = (
    ("usd_per_gpu_hour", "$/GPU-hour"),
    ("usd_per_kwh", "$/kWh"),
    ("usd_per_hour", "$/hour"),
    ("gb_per_s", "GB/s (decimal)"),
    ("gbps", "GB/s (decimal)"),
    ("tflops", "TFLOP/s"),
    ("gib", "GiB"),
    ("gb", "GB (decimal)"),
    ("us", "µs"),
    ("ms", "ms"),
    ("s", "s"),
    ("h", "hours"),
    ("w", "W"),
    ("tokens", "tokens"),
    ("rps", "requests/s"),
    ("qps", "requests/s"),
    ("session_rate", "sessions/s"),
    ("fraction", "fraction"),
    ("share", "fraction"),
    ("efficiency", "fraction"),
    ("utilization", "fraction"),
    ("watermark", "fraction"),
    ("bytes_per_element", "bytes"),
    ("params", "parameters"),
    ("replicas", "replicas"),
    ("block_size", "tokens"),
)


@dataclass(frozen=True)
class Key:
    """One row of a table: a dotted key, its default as YAML writes it, and its meaning."""

    name: str
    default: str
    meaning: str

    @property
    def unit(self) -> str:
        return unit_of(self.name)


def unit_of(dotted: str) -> str:
    """The unit the key's last part names ('' for none: a count, a switch, a name)."""
    last = dotted.rsplit(".", 1)[-1]
    return next((u for end, u in UNITS if last == end or last.endswith(f"_{end}")), "")


def flow(value: Any) -> str:
    """``value`` as YAML writes it on one line (``null``, ``true``, ``[1, 2]``)."""
    if isinstance(value, str) and "\n" not in value:
        return value
    text = yaml.safe_dump(value, default_flow_style=True, width=10**9)
    return text.strip().removesuffix("...").strip()  # a scalar's document-end marker


# -- the YAML files: keys, values and their comments -----------------------------------------

_KEY = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z_][\w.\-]*)\s*:(?P<rest>.*)$")


def _strip_comment(rest: str) -> tuple[str, str]:
    """``rest`` of a key's line split into its value and its trailing comment."""
    quote = None
    for i, ch in enumerate(rest):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or rest[i - 1].isspace()):
            return rest[:i].strip(), rest[i + 1 :].strip()
    return rest.strip(), ""


def yaml_comments(text: str) -> tuple[str, dict[str, str]]:
    """A YAML file's header comment, and each dotted key's comment: the comment lines just
    above it (no blank line between), then the one on its line and the comment lines below that
    are indented past the key (a continued trailing comment)."""
    lines = text.splitlines()
    header: list[str] = []
    i = 0
    while i < len(lines) and lines[i].lstrip().startswith("#"):
        if not lines[i].lstrip().startswith("# @package"):
            header.append(lines[i].lstrip()[1:].strip())
        i += 1
    comments: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    pending: list[str] = []
    block_indent: int | None = None  # inside a block scalar (>- or |) of a key at this indent
    for line in lines[i:]:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if block_indent is not None:
            if not stripped or indent > block_indent:
                continue
            block_indent = None
        if not stripped:
            pending = []
            continue
        if stripped.startswith("#"):
            last = stack[-1] if stack else None
            if last and not pending and indent > last[0] and comments.get(_dotted(stack)):
                comments[_dotted(stack)] += " " + stripped[1:].strip()  # a continued comment
            else:
                pending.append(stripped[1:].strip())
            continue
        match = _KEY.match(line)
        if not match or stripped.startswith("- "):
            pending = []
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match["key"]))
        value, trailing = _strip_comment(match["rest"])
        if value.startswith((">", "|")):
            block_indent = indent
        comments[_dotted(stack)] = " ".join([*pending, trailing]).strip()
        pending = []
    return " ".join(header).strip(), comments


def _dotted(stack: list[tuple[int, str]]) -> str:
    return ".".join(key for _, key in stack)


def flatten(value: Any, prefix: str) -> dict[str, Any]:
    """``value``'s leaves by dotted key; a data mapping (``DATA_MAPPINGS``) stays one leaf."""
    if not isinstance(value, dict) or not value or prefix.rsplit(".", 1)[-1] in DATA_MAPPINGS:
        return {prefix: value}
    out: dict[str, Any] = {}
    for key, item in value.items():
        out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    return out


@dataclass(frozen=True)
class Option:
    """One file of a config group (``configs/GROUP/NAME.yaml``)."""

    group: str
    name: str
    header: str
    keys: list[Key]


def load_option(path: Path, group: str) -> Option:
    text = path.read_text()
    header, comments = yaml_comments(text)
    data = yaml.safe_load(text) or {}
    keys = []
    for dotted, value in flatten(
        {k: v for k, v in data.items() if k not in ("defaults", "hydra")}, ""
    ).items():
        meaning = comments.get(dotted, "")
        parent = dotted
        while not meaning and "." in parent:  # a leaf of a commented mapping: the mapping's
            parent = parent.rsplit(".", 1)[0]
            meaning = comments.get(parent, "")
        name = f"{group}.{dotted}" if group else dotted
        keys.append(Key(name, flow(value), meaning))
    return Option(group, path.stem, header, keys)


def groups() -> list[str]:
    """The config groups, in the order of ``configs/config.yaml``'s defaults, then the rest."""
    listed = [
        next(iter(d))
        for d in yaml.safe_load((CONFIGS / "config.yaml").read_text())["defaults"]
        if isinstance(d, dict) and not next(iter(d)).startswith("override")
    ]
    rest = sorted(p.name for p in CONFIGS.iterdir() if p.is_dir() and p.name not in listed)
    return [g for g in listed + rest if g not in NOT_GROUPS and (CONFIGS / g).is_dir()]


def options(group: str) -> list[Option]:
    return [load_option(p, group) for p in sorted((CONFIGS / group).glob("*.yaml"))]


# -- the schema: the keys the code accepts ----------------------------------------------------


def _field_comments(model: type[BaseModel]) -> dict[str, str]:
    """Each field's comment in ``model``'s source: the comment lines above it and on its line."""
    try:
        source = textwrap.dedent(inspect.getsource(model))
    except (OSError, TypeError):
        return {}
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string[1:].strip()
    lines = source.splitlines()
    out: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        match = re.match(r"^    (\w+)\s*:", line)
        if not match or match[1] not in model.model_fields:
            continue
        above, k = [], number - 1
        while k in comments and lines[k - 1].strip().startswith("#"):
            above.insert(0, comments[k])
            k -= 1
        out[match[1]] = " ".join([*above, comments.get(number, "")]).strip()
    return out


def _models_in(annotation: Any) -> tuple[list[type[BaseModel]], bool]:
    """The models an annotation holds (each member of a union), and whether it is a mapping
    from names to them (``dict[str, Model]``)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _models_in(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        found: list[type[BaseModel]] = []
        mapping = False
        for arg in typing.get_args(annotation):
            models, is_map = _models_in(arg)
            found += [m for m in models if m not in found]
            mapping = mapping or is_map
        return found, mapping
    if origin is dict:
        models, _ = _models_in(typing.get_args(annotation)[1])
        return models, bool(models)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation], False
    return [], False


def schema_keys(model: type[BaseModel], prefix: str) -> dict[str, Key]:
    """Every dotted key ``model`` accepts under ``prefix``, with its default and comment
    (a mapping from names to models: ``prefix.<name>.field``)."""
    out: dict[str, Key] = {}
    comments = _field_comments(model)
    for name, field in model.model_fields.items():
        dotted = f"{prefix}.{field.alias or name}" if prefix else (field.alias or name)
        models, mapping = _models_in(field.annotation)
        if models:
            below = f"{dotted}.{MAPPING_ITEM}" if mapping else dotted
            for sub in models:
                for key, row in schema_keys(sub, below).items():
                    out.setdefault(key, row)
            if mapping or not field.is_required():
                continue
        if field.default is not PydanticUndefined:
            default = flow(field.default)
        elif field.default_factory is not None:
            default = flow(field.default_factory())  # type: ignore[call-arg]
        else:
            default = "(required)"
        out.setdefault(dotted, Key(dotted, default, comments.get(name, "")))
    return out


def group_schemas() -> dict[str, list[type[BaseModel]]]:
    """Each group's schema: the models of ``RunConfig``'s fields (a tagged union, as
    ``workload`` by kind and ``placement`` by mode, has several), and ``plan``'s own."""
    from sim.config.schema import RunConfig
    from sim.plan.planner import PlanConfig

    out: dict[str, list[type[BaseModel]]] = {"plan": [PlanConfig]}
    for name, field in RunConfig.model_fields.items():
        models, _ = _models_in(field.annotation)
        if models:
            out[name] = models
    return out


def accepted_keys(group: str, models: list[type[BaseModel]]) -> dict[str, Key]:
    """The dotted keys of ``group`` its schema accepts (over all the union's members)."""
    out: dict[str, Key] = {}
    for model in models:
        for key, row in schema_keys(model, group).items():
            out.setdefault(key, row)
    return out


def top_level() -> Option:
    """``seed`` and ``output_dir``: the run's own keys in ``configs/config.yaml``."""
    option = load_option(CONFIGS / "config.yaml", "")
    return Option("", "config", option.header, option.keys)


# -- the page ----------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") or " "


def _table(keys: list[Key]) -> list[str]:
    rows = ["| key | default | unit | meaning |", "|---|---|---|---|"]
    rows += [
        f"| `{k.name}` | `{_cell(k.default)}` | {_cell(k.unit)} | {_cell(k.meaning)} |"
        for k in keys
    ]
    return rows


def _covered(key: str, listed: set[str]) -> bool:
    """Whether a table lists ``key`` or its leaves (``hardware.dense_tflops.bf16``)."""
    return key in listed or any(name.startswith(f"{key}.") for name in listed)


TARGET_MEANING = "the class that runs this option"


def _known_meanings(opts: list[Option], accepted: dict[str, Key]) -> dict[str, str]:
    """A meaning for a key its own file leaves uncommented: the schema's comment, else the
    comment another option of the group gives the same key."""
    known = {k.name: k.meaning for opt in reversed(opts) for k in opt.keys if k.meaning}
    known.update({name: k.meaning for name, k in accepted.items() if k.meaning})
    known.update(
        {k.name: TARGET_MEANING for opt in opts for k in opt.keys if k.name.endswith("._target_")}
    )
    return known


def render() -> str:
    """The generated part of reference/config.md."""
    schemas = group_schemas()
    out = ["## The run's own keys", "", *_table(top_level().keys), ""]
    for group in groups():
        opts = options(group)
        out += [f"## {group}", ""]
        names = ", ".join(f"`{group}={o.name}`" for o in opts)
        out += [f"Options (`configs/{group}/`): {names}.", ""]
        accepted = accepted_keys(group, schemas.get(group, []))
        known = _known_meanings(opts, accepted)
        listed: set[str] = set()
        for opt in opts:
            out += [f"### {group}={opt.name}", ""]
            if opt.header:
                out += [opt.header, ""]
            keys = [
                k if k.meaning else Key(k.name, k.default, known.get(k.name, "")) for k in opt.keys
            ]
            out += [*_table(keys), ""]
            listed |= {k.name for k in opt.keys}
        extra = [k for name, k in accepted.items() if not _covered(name, listed)]
        if extra:
            out += [
                f"### {group}: keys no shipped option sets",
                "",
                "Accepted by the schema; the default is the schema's.",
                "",
                *_table(extra),
                "",
            ]
    out += ["## experiment", "", "`+experiment=NAME` sets other groups' keys for one study.", ""]
    out += ["| option | what it asks |", "|---|---|"]
    for path in sorted((CONFIGS / "experiment").glob("*.yaml")):
        header, _ = yaml_comments(path.read_text())
        out.append(f"| `+experiment={path.stem}` | {_cell(header)} |")
    out += ["", "## hydra/launcher", "", "| option | what it is |", "|---|---|"]
    for path in sorted((CONFIGS / "hydra" / "launcher").glob("*.yaml")):
        header, _ = yaml_comments(path.read_text())
        out.append(f"| `hydra/launcher={path.stem}` | {_cell(header)} |")
    return "\n".join(out) + "\n"


def on_page_markdown(markdown: str, **_: Any) -> str:
    """The MkDocs hook: the marker replaced by the generated tables."""
    return markdown.replace(MARKER, render()) if MARKER in markdown else markdown
