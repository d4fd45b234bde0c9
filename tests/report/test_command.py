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
    assert "| step-time model | roofline, uncalibrated: TTFT 22.1%" in markdown
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
    assert "no workload or KV-cache figure" in markdown
    assert "| inputs produced by | fleetcast plan step_time=constant" in markdown


def test_a_collected_sweep(sweep_folder):
    _, markdown = report(sweep_folder)
    assert markdown.startswith("# Fleetcast report: sweep s\n\n## Answer\n\n> Of 4 runs")
    for figure in ("latency_vs_load.png", "cost.png", "workload.png", "kv_cache.png"):
        assert f"(report_files/{figure})" in markdown


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


def test_the_page_renders_in_a_browser_with_every_image_and_no_error(run_report, tmp_path):
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
            page = browser.new_page()
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.on(
                "request",
                lambda r: None if r.url.startswith(("file:", "data:")) else fetched.append(r.url),
            )
            page.goto((run_report / "report.html").as_uri(), wait_until="load")
            widths = page.eval_on_selector_all("img", "images => images.map(i => i.naturalWidth)")
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        finally:
            browser.close()
    assert not problems and not fetched, (problems, fetched)
    assert len(widths) >= 2 and all(w > 0 for w in widths), widths
    assert (tmp_path / "report.png").stat().st_size > 0


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
