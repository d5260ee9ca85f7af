"""The HTML report (reports/<run>.html beside the PDF): the PDF's sections in its order, in
one file that needs no network, every figure a plotly one; and, in headless Chromium,
every section rendered, every figure drawn, no console error, a screenshot."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.analysis import analyse, evaluate
from harness.analysis.tables import Analysis
from harness.report.html_build import html_report, write_html
from harness.report.html_page import plotly_js
from harness.report.views import SECTION_ORDER
from harness.rundir.verdict import Verdict
from tests.analysis.runfolder import RunBuilder

# The PDF's order: one <section> each, always present.
SECTIONS = list(SECTION_ORDER)
FIGURES = 19  # of half_empty_run's report


def half_empty_run(root: Path) -> RunBuilder:
    """A full run, except that task gsm8k has no speed cell: its panels are empty."""
    b = RunBuilder(root)
    b.speed_cells(tasks=("chat",))
    b.identity_cells()
    b.accuracy_cells()
    b.open_cells()
    return b


def section_ids(text: str) -> list[str]:
    return re.findall(r'<section class="report-section" id="([^"]+)"', text)


def test_html_is_self_contained_with_plotly_figures_and_html_tables(tmp_path):
    a = analyse(half_empty_run(tmp_path).root)
    text = html_report(a, evaluate(a))
    assert section_ids(text) == SECTIONS
    # plotly.js inlined once, nothing fetched: no src= or stylesheet link anywhere.
    assert text.count(plotly_js()[:200]) == 1
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=", text)
    assert "cdn.plot.ly" not in text.replace(plotly_js(), "")
    divs = re.findall(r'<div id="(fig-\d+)" class="plotly-graph-div"', text)
    assert divs == [f"fig-{i}" for i in range(1, len(divs) + 1)] and len(divs) >= 15
    # Headline 2 x 2 + speedups 2 + decomposition 2 + curves 2 + acceptance 3 x 2 +
    # consistency, accuracy, open loop (no GPU readings: the section says why, in text).
    assert len(divs) == FIGURES
    # The empty task's panels are labelled, never an error.
    assert "no usable speed cells" in text and "no complete speed cells" in text
    # Tables the PDF prints as fixed-width text are HTML tables here, row for row.
    intervals = text[text.index('id="intervals"') : text.index('id="decomposition"')]
    assert "<th>arm</th><th>task</th><th>c</th>" in intervals
    assert intervals.count('<td class="">vllm-ngram</td><td class="">chat</td>') == 2 * 5
    # The text pages' words, as the PDF has them.
    assert "Registered: recording.sessions 1" in intervals
    assert "roofline inputs:" in text and "Fleet figure:" in text
    assert "arm settings the engine would otherwise pick" in text


def test_each_section_in_the_shared_order_has_a_pdf_and_an_html_renderer():
    """One order for both outputs: a section drawn by one renderer only, or by neither,
    fails here rather than going missing from one report."""
    from harness.report.build import PDF_PAGES
    from harness.report.html_sections import HTML_SECTIONS
    from harness.report.views import SECTION_ORDER

    assert list(SECTION_ORDER) == SECTIONS
    assert set(PDF_PAGES) == set(HTML_SECTIONS) == set(SECTION_ORDER)


def test_each_section_is_built_once_as_a_view(tmp_path):
    """Every section has its view (harness/report/views/); that the renderers draw only
    views is tests/report/test_renderers_draw_views.py."""
    from harness.report.views.acceptance import build_acceptance_view
    from harness.report.views.accuracy import build_accuracy_view
    from harness.report.views.categories import build_categories_view
    from harness.report.views.consistency import build_consistency_view
    from harness.report.views.decomposition import build_decomposition_view
    from harness.report.views.gpu import build_gpu_view
    from harness.report.views.open_loop import build_open_loop_view
    from harness.report.views.speed import build_speed_curves_view
    from harness.report.views.speedups import build_speedups_view
    from harness.report.views.surface import build_surface_view
    from harness.report.views.text import TEXT_VIEWS
    from harness.report.views.verdict import build_verdict_view

    views: dict[str, Callable[[Analysis, Verdict], Any]] = {
        "verdict": build_verdict_view,
        "speedups": build_speedups_view,
        "decomposition": build_decomposition_view,
        "categories": build_categories_view,
        "surface": build_surface_view,
        "speed-curves": build_speed_curves_view,
        "acceptance": build_acceptance_view,
        "consistency": build_consistency_view,
        "accuracy": build_accuracy_view,
        "open-loop": build_open_loop_view,
        "gpu": build_gpu_view,
        **TEXT_VIEWS,
    }
    assert sorted(views) == sorted(SECTIONS)
    a = analyse(half_empty_run(tmp_path).root)
    v = evaluate(a)
    assert all(views[section](a, v).title for section in SECTIONS)


def test_the_same_lines_give_the_pdf_its_fixed_width_tables():
    """The tables keep their text lines: the PDF's pages print exactly what they did."""
    from harness.report.layout import TableLine, table_lines

    lines = table_lines(["arm", "c"], [["vllm-ngram", 1], ["b", 16.0]])
    assert lines == ["arm         c ", "--------------", "vllm-ngram  1 ", "b           16"]
    assert all(
        isinstance(line, TableLine) and line.table.rows == [["vllm-ngram", "1"], ["b", "16"]]
        for line in lines
    )


@pytest.mark.alone  # a browser: phase 2, one at a time
def test_html_report_renders_in_headless_chromium(tmp_path):
    from scripts.headless_chromium import ChromiumMissing, check_page, find_chromium

    try:
        find_chromium()
    except ChromiumMissing as err:
        pytest.fail(str(err))
    a = analyse(half_empty_run(tmp_path).root)
    page = write_html(a, evaluate(a), tmp_path / "reports" / "synthetic-run.html")
    shot = tmp_path / "synthetic-run.png"
    started = time.monotonic()
    check = check_page(page, shot)
    print(f"screenshot: {shot} ({time.monotonic() - started:.1f} s in Chromium)")
    assert check.problems() == []
    assert [s["id"] for s in check.sections] == SECTIONS
    assert all(s["height"] > 0 for s in check.sections)
    assert len(check.figures) == page.read_text().count('class="plotly-graph-div"') == FIGURES
    assert all(f["svg"] and f["height"] > 100 for f in check.figures)
    assert check.plotly_version and check.requests == [] and check.errors == []
    assert shot.stat().st_size > 20_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.alone
def test_a_page_error_is_reported_by_the_browser_check(tmp_path):
    """The check itself: a console error, an exception, a figure that never draws and a
    request for the network are each a problem (else a broken page would pass)."""
    from scripts.headless_chromium import ChromiumMissing, check_page, find_chromium

    try:
        find_chromium()
    except ChromiumMissing as err:
        pytest.fail(str(err))
    page = tmp_path / "broken.html"
    page.write_text(
        '<!DOCTYPE html><html><body><section class="report-section" id="s">x'
        '</section><div id="f" class="plotly-graph-div"></div>'
        '<img src="http://127.0.0.1:9/x.png">'  # refused at once, online or not
        "<script>console.error('boom'); undefinedThing();</script></body></html>"
    )
    # A figure that never draws is waited for draw_timeout, then named.
    check = check_page(page, timeout=60, draw_timeout=3)
    problems = "\n".join(check.problems())
    assert "console: boom" in problems and "undefinedThing" in problems
    assert "figure f drew no SVG" in problems
    assert "network request: http://127.0.0.1:9/x.png" in problems


def test_a_missing_chromium_is_named_with_how_to_install_it(monkeypatch):
    """The browser tests fail (never skip) on a machine without it, saying what to do."""
    from scripts.headless_chromium import ChromiumMissing, find_chromium

    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ChromiumMissing, match=r"apt-get install -y chromium"):
        find_chromium()


def test_the_gpu_figure_shades_every_other_cell_as_the_pdf_does():
    """Three cells' readings: the second cell's span is shaded across the three panels, as
    the PDF page's axvspan does, and a throttled reading is marked."""
    import pandas as pd

    from harness.analysis.gpu import GPU_SERIES_COLUMNS
    from harness.report import html_figures_cells
    from harness.report.views.gpu import GpuView, alternate_cell_spans, gpu_traces

    rows = []
    for i, cell in enumerate(["a/chat/speed/c001", "a/chat/speed/c002", "a/chat/speed/c004"]):
        for j in range(3):
            rows.append(
                {column: None for column in GPU_SERIES_COLUMNS}
                | {
                    "cell_id": cell,
                    "wall_time": 1000.0 + 60 * (3 * i + j),
                    "gpu": 0,
                    "ok": True,
                    "sm_clock_mhz": 1980.0,
                    "mem_clock_mhz": 2619.0,
                    "power_w": 300.0,
                    "power_limit_w": 350.0,
                    "temperature_c": 60.0,
                    "throttled": (i, j) == (2, 2),
                }
            )
    series = pd.DataFrame(rows, columns=GPU_SERIES_COLUMNS)
    minutes = (series["wall_time"] - 1000.0) / 60.0
    spans = alternate_cell_spans(series, minutes)
    assert spans == [("a/chat/speed/c002", 3.0, 5.0)]
    view = GpuView(
        "GPU telemetry across the run", "", "", gpu_traces(series, minutes), spans, "", "", []
    )
    fig = html_figures_cells.gpu_figure(view)
    shaded = [(s.x0, s.x1) for s in fig.layout.shapes]
    assert shaded == [(3.0, 5.0)] * 3  # one rectangle a panel
    assert [t.name for t in fig.data if "throttled" in t.name] == ["GPU 0 throttled"] * 3


def test_the_speed_curves_draw_drafters_solid_and_baselines_dashed_as_the_pdf_does(
    tmp_path, monkeypatch
):
    """The HTML drew the opposite of the PDF (drafters dashed) until 2026-12-06: both read
    the one view, a drafter solid with circles, a baseline dashed with squares."""
    from matplotlib.backends.backend_pdf import PdfPages

    from harness.report import pages_speed
    from harness.report.html_figures import speed_curves_figure
    from harness.report.views.speed import build_speed_curves_view

    a = analyse(half_empty_run(tmp_path).root)
    verdict = evaluate(a)
    view = build_speed_curves_view(a, verdict)
    drafter = {c.arm: c.drafter for c in view.tasks["chat"]}
    assert set(drafter.values()) == {False, True}, drafter  # baselines and drafters
    html = {(t.name, t.line.dash, t.marker.symbol) for t in speed_curves_figure(view, "chat").data}
    assert html == {
        (arm, "solid" if d else "dash", "circle" if d else "square") for arm, d in drafter.items()
    }
    drawn: set[tuple[str, str, str]] = set()
    real_save = pages_speed.save

    def keep_lines(pdf, fig):  # the page's lines, read before it is saved and closed
        for ax in fig.axes:
            for line in ax.get_lines():
                if line.get_label() in drafter:
                    drawn.add((line.get_label(), line.get_linestyle(), line.get_marker()))
        real_save(pdf, fig)

    monkeypatch.setattr(pages_speed, "save", keep_lines)
    with PdfPages(tmp_path / "speed.pdf") as pdf:
        assert pages_speed.speed_curve_pages(pdf, a, verdict) >= 1
    assert drawn == {(arm, "-" if d else "--", "o" if d else "s") for arm, d in drafter.items()}


def test_a_surface_run_with_nothing_measured_renders_its_gaps(tmp_path):
    """The surface's cells have no bounds until they are measured: the HTML draws gaps
    (until 2026-12-06 a None bound reached plotly's band and `specbench report` failed on
    every surface run stopped before its surface was measured)."""
    from harness.prereg import load_study_file
    from harness.run.runner import new_run

    root = Path(__file__).parents[2]
    store = new_run(load_study_file(root / "examples" / "scripted-surface.yaml"), tmp_path)
    a = analyse(store.root)
    assert not a.surface_cells.empty
    assert a.surface_cells["round_cost_ratio_ci_upper"].isna().all()
    page = write_html(a, evaluate(a), tmp_path / "report.html")
    assert 'id="surface"' in page.read_text()
