"""The documentation site: its reference pages list exactly what the code has, and the built
site opens in a browser page by page.

The reference pages are written at build by the hooks in docs/hooks/ (mkdocs.yml); these tests
hold what they write against the code by other roads: the composed config and the classes a
policy group names, the contract checker's columns (tests/contract.py) and the summaries real
runs write. The last test builds the site as ``make docs`` does (strict) and follows its
navigation in headless Chromium.
"""

from __future__ import annotations

import http.server
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import types
import typing
from functools import cache, partial
from types import ModuleType

import pytest
import yaml
from pydantic import BaseModel

from sim.cli import COMMANDS
from sim.config.build import target_class
from sim.output.faults import FAULTS_SCHEMA
from sim.output.results import REQUESTS_SCHEMA, requests_schema
from sim.output.scaling import SCALING_SCHEMA
from sim.output.step_log import BUCKETED_STEPS_SCHEMA, STEPS_SCHEMA
from sim.signature import constructor
from tests.contract import DISTRIBUTIONS, REQUEST_COLUMNS, STATS, STEP_COLUMNS, SUMMARY_KEYS
from tests.support import REPO_ROOT, compose, fleetcast

HOOKS = REPO_ROOT / "docs" / "hooks"
CONFIGS = REPO_ROOT / "configs"
POLICY_GROUPS = ("scheduler", "router", "step_time")  # `_target_` groups: options are arguments


@cache
def hook(name: str) -> ModuleType:
    """A hook module of docs/hooks/ (they are files MkDocs loads, not a package)."""
    spec = importlib.util.spec_from_file_location(f"docs_hook_{name}", HOOKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@cache
def config_page() -> str:
    return hook("config_reference").render()


def listed_keys(page: str) -> set[str]:
    """The keys in the first column of a page's tables (`key`)."""
    return set(re.findall(r"^\| `([^`]+)` \|", page, flags=re.M))


def _leaves(value: object, prefix: str) -> list[str]:
    if isinstance(value, dict) and value:
        return [k for key, item in value.items() for k in _leaves(item, f"{prefix}{key}.")]
    return [prefix.rstrip(".")]


def _is_listed(key: str, listed: set[str]) -> bool:
    """``key`` or one of the mappings it sits in (``cost.prices``) is listed."""
    parts = key.split(".")
    return any(".".join(parts[:n]) in listed for n in range(1, len(parts) + 1))


# -- configuration ------------------------------------------------------------------------------


def test_the_config_reference_lists_every_key_of_the_composed_config():
    listed = listed_keys(config_page())
    missing = [k for k in _leaves(compose(), "") if not k.startswith("hydra.")]
    missing = [k for k in missing if not _is_listed(k, listed)]
    assert not missing, f"reference/config.md lacks {missing}"


@pytest.mark.parametrize(
    "path",
    sorted(p for p in CONFIGS.glob("*/*.yaml") if p.parent.name != "experiment"),
    ids=lambda p: f"{p.parent.name}={p.stem}",
)
def test_the_config_reference_lists_every_key_of_every_option(path):
    data = {k: v for k, v in (yaml.safe_load(path.read_text()) or {}).items() if k != "defaults"}
    listed = listed_keys(config_page())
    group = path.parent.name
    missing = [k for k in _leaves(data, f"{group}.") if not _is_listed(k, listed)]
    assert not missing, f"reference/config.md lacks {missing} of {path.relative_to(REPO_ROOT)}"
    assert f"### {group}={path.stem}\n" in config_page()


def test_the_config_reference_lists_every_field_of_the_schema():
    from sim.config.schema import RunConfig
    from sim.plan.planner import PlanConfig

    listed = listed_keys(config_page())
    fields = [*(("", name) for name in RunConfig.model_fields), ("plan.", "slo")]
    fields += [("plan.", name) for name in PlanConfig.model_fields]
    missing = [
        f"{prefix}{name}"
        for prefix, name in fields
        if not any(k == f"{prefix}{name}" or k.startswith(f"{prefix}{name}.") for k in listed)
    ]
    assert not missing, f"reference/config.md lacks {missing}"


def _models(annotation: object) -> tuple[list[type[BaseModel]], bool]:
    """The pydantic models an annotation holds (each member of a union, a mapping's values),
    and whether it holds a mapping."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Annotated, list):
        return _models(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, dict):
        found: list[type[BaseModel]] = []
        mapping = origin is dict
        for arg in typing.get_args(annotation):
            models, is_map = _models(arg)
            found += models
            mapping = mapping or is_map
        return found, mapping
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation], False
    return [], False


def _accepts(models: list[type[BaseModel]], path: list[str]) -> bool:
    """Whether one of the pydantic ``models`` accepts the dotted ``path`` below it (a part
    ``<name>`` stands for any key of a mapping)."""
    if not path:
        return True
    for model in models:
        fields = {f.alias or n: f for n, f in model.model_fields.items()}
        if path[0] not in fields:
            continue
        inner, mapping = _models(fields[path[0]].annotation)
        rest = path[1:]
        if mapping and rest[:1] == [hook("config_reference").MAPPING_ITEM]:
            rest = rest[1:]
        if not rest or _accepts(inner, rest) or (mapping and not inner):
            return True
    return False


def _policy_arguments(group: str) -> set[str]:
    """Every argument the classes a policy group's options name take."""
    names: set[str] = {"_target_"}
    for path in (CONFIGS / group).glob("*.yaml"):
        cls = target_class(yaml.safe_load(path.read_text()), group)
        names |= set(constructor(cls)[0].parameters)
    return names


def test_nothing_in_the_config_reference_is_unknown_to_the_code():
    from sim.config.schema import RunConfig
    from sim.plan.planner import PlanConfig

    unknown = []
    for key in listed_keys(config_page()):
        if "=" in key:  # an experiment or a launcher, listed by name
            continue
        group, _, rest = key.partition(".")
        if group in POLICY_GROUPS:
            known = rest in _policy_arguments(group)
        elif group == "plan":
            known = _accepts([PlanConfig], rest.split("."))
        else:
            known = _accepts([RunConfig], key.split("."))
        if not known:
            unknown.append(key)
    assert not unknown, f"reference/config.md lists keys the code does not take: {unknown}"


def test_a_key_gets_its_yaml_comment_and_its_unit():
    page = config_page()
    assert "| `kv.block_size` | `16` | tokens | tokens per block; vLLM's default on GPUs |" in page
    row = next(line for line in page.splitlines() if line.startswith("| `kv.cpu_offload_gib`"))
    assert "| GiB | host memory (GiB per replica" in row and "0 = no second tier" in row


# -- outputs ------------------------------------------------------------------------------------


@cache
def output_page() -> str:
    return hook("output_reference").render()


def _section(page: str, title: str) -> str:
    match = re.search(rf"^### {re.escape(title)}\n(.*?)(?=^### |\Z)", page, flags=re.S | re.M)
    assert match, f"no section {title}"
    return match.group(1)


@pytest.mark.parametrize(
    ("title", "schema_columns", "contract_columns"),
    [
        (
            "requests.parquet",
            [f.name for f in requests_schema(True, True, True, True, True)],
            REQUEST_COLUMNS,
        ),
        ("steps.parquet", [f.name for f in STEPS_SCHEMA] + ["pool"], STEP_COLUMNS),
        (
            "steps.parquet (output.steps=bucketed)",
            [f.name for f in BUCKETED_STEPS_SCHEMA] + ["pool"],
            STEP_COLUMNS,
        ),
        ("scaling.parquet", [f.name for f in SCALING_SCHEMA], ()),
        ("faults.parquet", [f.name for f in FAULTS_SCHEMA], ()),
    ],
)
def test_the_output_reference_lists_exactly_the_columns_of_each_table(
    title, schema_columns, contract_columns
):
    listed = re.findall(r"^\| `([^`]+)` \|", _section(output_page(), title), flags=re.M)
    assert listed == list(dict.fromkeys(schema_columns))
    assert set(contract_columns) <= set(listed)


def test_the_optional_request_columns_say_when_they_are_there():
    section = _section(output_page(), "requests.parquet")
    always = {f.name for f in REQUESTS_SCHEMA}
    for line in section.splitlines()[2:]:
        if line.startswith("| `"):
            name = line.split("`")[1]
            assert ("| always |" in line) == (name in always), line


def test_an_output_column_without_a_meaning_stops_the_build():
    module = hook("output_reference")
    with pytest.raises(module.UndocumentedColumn, match="requests.parquet new_column"):
        module.meaning("requests.parquet", "new_column")


# Small runs of every kind whose summary has blocks of its own: together they write every key.
SUMMARY_RUNS = {
    "default": ["workload.num_requests=20"],
    "prefix caching, host tier, sessions": [
        "kv.prefix_caching=true",
        "kv.cpu_offload_gib=8",
        "workload=sessions",
        "workload.num_sessions=5",
    ],
    "disaggregated": ["workload.num_requests=20", "placement=disaggregated"],
    "price tiers, a drain that fails nothing": [
        "workload.num_requests=20",
        "fleet.tiers={reserved: 1, on_demand: rest}",
        "faults.maintenance=[{replica: 1, at_s: 0, duration_s: 1}]",
    ],
    "autoscaled": ["workload.num_requests=20", "autoscale.policy=utilization"],
    "speculative decoding": ["workload.num_requests=20", "spec_decode.num_draft_tokens=3"],
    "model error": ["workload.num_requests=20", "+output.model_error=true"],
    "faults": [
        "workload.num_requests=20",
        "fleet.replicas=2",  # (the second lost at once: some requests fail for want of one)
        "faults.schedule=[{replica: 1, at_s: 0}]",
        "faults.maintenance=[{replica: 0, at_s: 1, duration_s: 10}]",
    ],
    "faults on a disaggregated fleet (by pool)": [
        "workload.num_requests=20",
        "placement=disaggregated",
        "fleet.replicas=3",
        "faults.schedule=[{replica: 2, at_s: 0.5, repair_s: 1}]",
    ],
    "two models, energy, rejections": [
        "placement=colocated",
        "cost.energy.enabled=true",
        "cost.requests_per_day=1e6",
        "workload=poisson",
        "workload.num_requests=20",
        "workload.prompt_tokens={dist: uniform, low: 100, high: 200000}",
    ],
}


def _family(key: str) -> str:
    """A summary key as the reference writes its family (``ttft_s.<stat>``...)."""
    key = re.sub(rf"_s\.({'|'.join(STATS)})$", "_s.<stat>", key)  # a distribution of seconds
    key = re.sub(r"^disaggregation\.(prefill|decode)\.", "disaggregation.<pool>.", key)
    key = re.sub(r"^faults\.by_pool\.(prefill|decode)\.", "faults.by_pool.<pool>.", key)
    key = re.sub(r"^autoscale\.engines\.[^.]+\.", "autoscale.engines.<engine>.", key)
    key = re.sub(r"^cost\.per_tier\.[^.]+\.", "cost.per_tier.<tier>.", key)
    key = re.sub(r"^(faults\.)?failed_by_reason\..+$", r"\1failed_by_reason.<reason>", key)
    return re.sub(r"^rejected_by_reason\..+$", "rejected_by_reason.<reason>", key)


def test_the_output_reference_lists_exactly_the_summary_keys_runs_write(tmp_path):
    written: set[str] = set()
    for i, overrides in enumerate(SUMMARY_RUNS.values()):
        done = fleetcast(*overrides, f"output_dir={tmp_path / str(i)}", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        summary = json.loads((tmp_path / str(i) / "summary.json").read_text())
        written |= {_family(k) for k in _leaves(summary, "")}
    documented = set(hook("output_reference").SUMMARY)
    assert written - documented == set(), "summary keys missing from reference/outputs.md"
    assert documented - written == set(), "reference/outputs.md lists keys no run writes"
    assert {f"{d}.<stat>" for d in DISTRIBUTIONS} <= documented
    assert all(any(k.split(".")[0] == key for k in documented) for key in SUMMARY_KEYS)


# -- commands -----------------------------------------------------------------------------------


def test_the_command_reference_has_every_command_with_its_options():
    page = hook("command_reference").render()
    for command in COMMANDS:
        assert f"\n## {command}\n" in page, command
    for option in ("--no-requests", "--bench FILE", "--index INDEX", "--title TITLE"):
        assert option in page
    assert "Traceback" not in page


# -- the site -----------------------------------------------------------------------------------


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the built site without a log line per request."""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base's name)
        pass


@pytest.fixture(scope="module")
def built_site(tmp_path_factory):
    """The site as ``make docs`` builds it (strict), in a temporary folder."""
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (the docs extra has it)")
    pytest.importorskip("material", reason="mkdocs-material is not installed (the docs extra)")
    site = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return site


def _nav_pages() -> list[str]:
    """The pages mkdocs.yml's nav names, in order."""

    def walk(items: list) -> list[str]:
        out: list[str] = []
        for item in items:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            out += walk(value) if isinstance(value, list) else [value]
        return out

    nav = yaml.safe_load((REPO_ROOT / "mkdocs.yml").read_text())["nav"]
    return walk(nav)


def test_the_nav_names_every_page_of_the_docs_once():
    pages = _nav_pages()
    assert len(pages) == len(set(pages))
    on_disk = {
        str(p.relative_to(REPO_ROOT / "docs"))
        for p in (REPO_ROOT / "docs").rglob("*.md")
        if "hooks" not in p.parts
    }
    assert set(pages) == on_disk


@pytest.fixture(scope="module")  # the same scope as built_site: asked first, set up first
def chromium() -> str:
    """Debian's Chromium for Playwright (which cannot download its own browsers here)."""
    pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (the test extra has it)"
    )
    path = shutil.which("chromium")
    if path is None:
        pytest.skip("no chromium on PATH (.ci/run installs Debian's chromium)")
    return path


# chromium before built_site: a machine without a browser skips before building
def test_every_nav_link_opens_a_page_with_a_heading_and_no_console_error(chromium, built_site):
    from playwright import sync_api

    handler = partial(QuietHandler, directory=str(built_site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    root = f"http://127.0.0.1:{server.server_address[1]}/"
    problems: list[str] = []
    visited: dict[str, str] = {}  # page -> its heading
    tables: dict[str, int] = {}  # page -> its tables
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium)
            page = browser.new_page()
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.goto(root, wait_until="load")
            links = page.eval_on_selector_all(
                "nav.md-nav--primary a.md-nav__link[href]", "links => links.map(a => a.href)"
            )
            for url in dict.fromkeys(u.split("#")[0] for u in links):
                response = page.goto(url, wait_until="load")
                assert response is not None and response.ok, url
                heading = page.locator("article h1").first.inner_text(timeout=5000)
                visited[url.removeprefix(root)] = heading.strip().rstrip("¶").strip()
                tables[url.removeprefix(root)] = page.locator("article table").count()
            browser.close()
    finally:
        server.shutdown()
    assert not problems, problems
    assert len(visited) == len(_nav_pages()), sorted(visited)
    assert all(visited.values()), visited
    assert visited["reference/config/"] == "Configuration"
    # the generated tables are in the pages: a group's options each, every output table
    assert tables["reference/config/"] > 50 and tables["reference/outputs/"] >= 8


# -- examples -----------------------------------------------------------------------------------


def _examples(text: str) -> list[tuple[list[str], str]]:
    """Each ``$ fleetcast ARGS`` in a page's code blocks, with what it prints up to the next
    prompt or the block's end (a ``# comment`` after the command is left out)."""
    examples = []
    for block in re.findall(r"^```(?:text)?\n(.*?)^```", text, flags=re.S | re.M):
        for command, printed in re.findall(r"^\$ fleetcast (.*)\n((?:(?!\$ ).*\n?)*)", block, re.M):
            examples.append((shlex.split(command.split("  #")[0]), printed.strip()))
    return examples


ERRORS_PAGE = REPO_ROOT / "docs" / "reference" / "errors.md"


ERROR_EXAMPLES = _examples(ERRORS_PAGE.read_text())


@pytest.mark.parametrize(
    ("args", "printed"), ERROR_EXAMPLES, ids=[" ".join(args) for args, _ in ERROR_EXAMPLES]
)
def test_each_example_of_the_errors_page_prints_its_line_and_exits_2(args, printed, tmp_path):
    # the trace example's file: its row 2 has a prompt length that is not a number
    (tmp_path / "t.csv").write_text(
        "arrival_time_s,prompt_tokens,output_tokens\n0.0,100,10\n0.5,abc,10\n"
    )
    done = fleetcast(*args, cwd=tmp_path)
    assert (done.returncode, done.stderr.strip(), done.stdout) == (2, printed, "")


def test_the_readme_first_run_prints_what_the_readme_shows(tmp_path):
    readme = (REPO_ROOT / "README.md").read_text()
    args, printed = next(e for e in _examples(readme) if "output_dir=runs/first" in e[0])
    done = fleetcast(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == printed
