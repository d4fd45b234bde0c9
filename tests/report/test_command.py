"""``fleetcast report`` end to end: each kind of folder becomes a self-contained HTML page and a
Markdown file whose figures exist, and the page renders in a real browser."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from sim.report import command

MAX_BYTES = 2 * 1024 * 1024
# a latency panel shown smaller than this (CSS pixels) crowds its three lines and SLO label
MIN_PANEL_PIXELS = 200
# a source or link to the network: a self-contained page has none
FETCHED = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", re.I)


def report(path: Path, *args: str) -> tuple[str, str]:
    """``fleetcast report PATH ARGS``, checked (``check``): the HTML and the Markdown."""
    assert command.main([str(path), *args]) == 0
    return check(path, *args)


def check(path: Path, *args: str) -> tuple[str, str]:
    """The report of ``fleetcast report PATH ARGS`` is whole: a self-contained page under 2 MB,
    and Markdown whose every figure is a file beside it; its HTML and Markdown."""
    stem = Path(args[args.index("--out") + 1]) if "--out" in args else path / "report"
    html = stem.with_name(stem.name + ".html").read_text()
    markdown = stem.with_name(stem.name + ".md").read_text()
    assert not FETCHED.search(html), FETCHED.search(html)
    assert "<script" not in html and "<link" not in html
    assert stem.with_name(stem.name + ".html").stat().st_size < MAX_BYTES
    files = stem.with_name(stem.name + "_files")
    shown = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", markdown)
    assert shown, "the Markdown shows no figure"
    for relative in shown:
        assert not relative.startswith("/") and (stem.parent / relative).is_file(), relative
    assert sorted(p.name for p in files.iterdir()) == sorted(Path(r).name for r in shown)
    assert html.count("<img ") == len(shown)
    assert not list(stem.parent.glob(".*partial")), "temporaries left behind"
    return html, markdown


@pytest.fixture(scope="module")
def run_report(run_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the run, reported: the folder."""
    folder = tmp_path_factory.mktemp("reported") / "run"
    shutil.copytree(run_folder, folder)
    assert command.main([str(folder)]) == 0
    return folder


def test_a_run(run_report):
    html, markdown = check(run_report)
    assert markdown.startswith("# Fleetcast report: run run\n\n## Answer\n\n> As simulated, 2 x ")
    for figure in ("workload.png", "kv_cache.png"):
        assert f"(report_files/{figure})" in markdown
    assert "| step-time model | roofline, uncalibrated: TTFT 22.3%" in markdown
    # policies by the config names a user chooses them by, not their classes
    assert "| scheduler | vllm (enable_chunked_prefill=True" in markdown
    assert "| router | least_outstanding |" in markdown
    assert "scheduler vllm served" in markdown and "Scheduler" not in markdown
    assert "| inputs produced by | fleetcast fleet.replicas=2 workload=poisson" in markdown
    assert f"| this report | fleetcast report {run_report} |" in markdown
    assert "data:image/png;base64," in html


def test_a_run_that_kept_no_steps_skips_the_kv_figure_and_a_new_report_replaces_the_old(
    run_folder, tmp_path
):
    import pyarrow.parquet as pq
    import yaml

    folder = tmp_path / "none"
    shutil.copytree(run_folder, folder)
    stem = tmp_path / "elsewhere" / "r"
    report(folder, "--out", str(stem))
    assert (tmp_path / "elsewhere" / "r_files" / "kv_cache.png").is_file()
    config = yaml.safe_load((folder / "config.yaml").read_text())
    config["output"]["steps"] = "none"
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    pq.write_table(pq.read_table(folder / "steps.parquet").slice(0, 0), folder / "steps.parquet")
    _, markdown = report(folder, "--out", str(stem), "--title", "Mine")
    assert markdown.startswith("# Mine\n")
    assert "No KV-cache figure: the run kept no step rows (output.steps=none)." in markdown
    # the figures' folder was replaced whole: the old KV figure is gone with it
    assert not (tmp_path / "elsewhere" / "r_files" / "kv_cache.png").exists()


def test_a_plan(plan_folder):
    _, markdown = report(plan_folder)
    assert "> Buy 2 x H100-SXM (TP 1, 2 GPUs)" in markdown
    for figure in ("latency_vs_load.png", "cost.png"):
        assert f"(report_files/{figure})" in markdown
    assert "| rank | candidate | replicas | GPUs | $/hour |" in markdown
    assert all(all(headings) for headings in headings(markdown)), headings(markdown)
    assert "| runs | P(miss) |" in markdown and "P(miss): the share of its replications" in markdown
    assert "no workload or KV-cache figure" in markdown
    assert "| inputs produced by | fleetcast plan step_time=constant" in markdown


def headings(markdown: str) -> list[list[str]]:
    """The column headings of each Markdown table."""
    lines = markdown.splitlines()
    return [
        [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        for line, below in zip(lines, lines[1:], strict=False)
        if line.startswith("| ") and below.startswith("|---")
    ]


def test_a_collected_sweep_ranks_each_run_only_against_runs_at_its_traffic(sweep_folder):
    """The fixture's runs are 1 or 2 replicas at 10 or 40 req/s: one replica at 40 req/s is
    the cheapest per token of all four, but it is cheaper only because it is busier."""
    _, markdown = report(sweep_folder)
    assert markdown.startswith("# Fleetcast report: sweep s\n\n## Answer\n\n> Of 4 runs")
    for figure in ("latency_vs_load", "cost_1", "cost_2", "workload", "kv_cache"):
        assert f"(report_files/{figure}.png)" in markdown
    assert "A run is ranked only against the runs offered the same traffic." in markdown
    assert "At workload.qps=10, " in markdown and "At workload.qps=40, " in markdown
    points = markdown[markdown.index("## Points") : markdown.index("## Assumptions")]
    tables = points.split("### Traffic ")[1:]
    assert [t.splitlines()[0] for t in tables] == ["workload.qps=10", "workload.qps=40"]
    for table in tables:
        rows = [line for line in table.splitlines() if line.startswith("| ") and "rank" not in line]
        # ranked within the traffic, each labelled by what differs in it: the fleet
        assert [row.split(" | ")[:2] for row in rows] == [
            ["| 1", "fleet.replicas=1"],
            ["| 2", "fleet.replicas=2"],
        ]
    # every column of every table has a heading
    assert all(all(headings) for headings in headings(markdown)), headings(markdown)
    assert headings(markdown)[-2][-1] == "SLO attainment"  # the second traffic's points


def test_a_day_plan(day_folder):
    _, markdown = report(day_folder)
    # the only answer that held plan.slo every hour (the fixture's answers share one run: it
    # went from one replica to two, so its range and the peak's GPUs)
    assert "> Buy the peak fleet (1-2 x H100-SXM (TP 1, up to 2 GPUs)" in markdown
    for figure in (
        "day_fleet",
        "day_attainment",
        "workload_peak",
        "kv_cache_peak",
        "scaling_peak",
    ):
        assert f"(report_files/{figure}.png)" in markdown
    assert (
        "| autoscaled | $98.67 | 33.0 | 31.2% | 99.20% | 22 of 24 | answers/autoscaled |"
    ) in markdown
    assert "autoscaled $98.67/day (99.20% attainment, plan.slo held in 22 of 24 hours)" in markdown
    assert "| 22:00-07:00 | 1.5 | hardware=h100_sxm | 1 | $2.99 |" in markdown
    assert "| inputs produced by | fleetcast plan-day workload=azure_day |" in markdown


# in the page: each image's natural and shown size, and the text of each table heading cell
LOOK = """() => ({
    images: [...document.images].map(i => [i.alt, i.naturalWidth, i.width, i.height]),
    headings: [...document.querySelectorAll("th")].map(th => th.innerText.trim()),
})"""


def browse(page_file: Path, screenshot: Path) -> dict:
    """``page_file`` opened in headless Chromium at a laptop's width: what ``LOOK`` finds,
    after asserting that nothing failed or was fetched; a full-page screenshot is saved."""
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (the test extra has it)"
    )
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("no chromium on PATH (.ci/run installs Debian's chromium)")
    problems: list[str] = []
    fetched: list[str] = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.on(
                "request",
                lambda r: None if r.url.startswith(("file:", "data:")) else fetched.append(r.url),
            )
            page.goto(page_file.as_uri(), wait_until="load")
            found = page.evaluate(LOOK)
            page.screenshot(path=str(screenshot), full_page=True)
        finally:
            browser.close()
    assert not problems and not fetched, (problems, fetched)
    assert screenshot.stat().st_size > 0
    return found


def test_the_page_renders_in_a_browser_with_every_image_and_no_error(run_report, tmp_path):
    found = browse(run_report / "report.html", tmp_path / "report.png")
    widths = [natural for _, natural, _, _ in found["images"]]
    assert len(widths) >= 2 and all(w > 0 for w in widths), widths


def test_a_plan_reads_in_a_browser_every_column_headed_and_its_panels_tall_enough(
    plan_folder, tmp_path
):
    folder = tmp_path / "plan"
    shutil.copytree(plan_folder, folder)
    report(folder)
    found = browse(folder / "report.html", tmp_path / "plan.png")
    assert found["headings"] and all(found["headings"]), found["headings"]
    assert "P(miss)" in found["headings"]
    shown = {alt: (width, height) for alt, _, width, height in found["images"]}
    # one row of TTFT and TPOT panels per candidate (the fixture has one), each row at least
    # MIN_PANEL_PIXELS tall as the page shows it
    width, height = shown["latency_vs_load"]
    assert height >= MIN_PANEL_PIXELS and width >= 2 * MIN_PANEL_PIXELS, shown


def test_a_real_day_plan_and_one_of_its_periods(real_day_folder):
    """A day plan as run_plan writes it (starting at 09:30, its seasonal fleet switching
    engines), and the plan folder of one of its periods."""
    _, markdown = report(real_day_folder)
    assert "> Buy the seasonal fleet" in markdown
    assert "plan.slo (ttft_s.mean <= 0.05) held in 24 of 24 hours" in markdown
    for figure in (
        "day_fleet",
        "day_attainment",
        "workload_seasonal",
        "kv_cache_seasonal",
        "scaling_seasonal",
    ):
        assert f"(report_files/{figure}.png)" in markdown
    assert "from the runs' start at 09:30" in markdown
    # the seasonal fleet runs two engines other than its own: no KV share is drawn
    assert "No KV-cache share: the run's schedule switches to other engine" in markdown
    seasonal = re.search(
        r"\| seasonal \| \$[\d.,]+ \| [\d.,]+ \| [\d.]+% \| ([^|]+) \| ([^|]+) \|", markdown
    )
    assert seasonal is not None and seasonal.groups() == ("100.00%", "24 of 24")
    _, period = report(real_day_folder / "periods" / "08-20")
    assert "> Buy 1 x " in period
    assert "This plan is the period 08-20 of the day plan in" in period
    assert "The run folder" not in period  # the chosen simulation was found in DAYPLAN/runs
    assert "| inputs produced by | fleetcast plan step_time=constant" in period


def test_an_out_that_cannot_be_created_is_one_line_before_anything_is_read(
    run_folder, tmp_path, capsys
):
    (tmp_path / "a_file").write_text("x")
    stem = tmp_path / "a_file" / "sub" / "report"
    assert command.main([str(run_folder), "--out", str(stem)]) == 2
    assert capsys.readouterr().err == (
        f"error: --out='{stem}': {tmp_path / 'a_file'} is a file, not a folder\n"
    )
    # STEM.html taken by a folder: the write itself fails, told in one line
    (tmp_path / "taken.html" / "x").mkdir(parents=True)
    assert command.main([str(run_folder), "--out", str(tmp_path / "taken")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --out='{tmp_path / 'taken'}': cannot write the report: ")
    assert err.count("\n") == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write in any folder")
def test_an_out_in_a_folder_we_may_not_write_is_one_line(run_folder, tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    assert command.main([str(run_folder), "--out", str(locked / "report")]) == 2
    assert capsys.readouterr().err == (
        f"error: --out='{locked / 'report'}': cannot write in {locked} (permission denied)\n"
    )
