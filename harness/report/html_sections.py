"""The HTML report's sections (views.SECTION_ORDER, the PDF's order), each from the same
Analysis and Verdict and the same views and text its PDF page prints."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import plotly.graph_objects as go

from harness.analysis.tables import Analysis
from harness.report import html_figures as speed
from harness.report import html_figures_cells as cells
from harness.report import html_figures_surface as surface
from harness.report.html_plotly import figure_div
from harness.report.html_text import escape, lines_html
from harness.report.views import SECTION_ORDER
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
from harness.report.views.text import TEXT_VIEWS, TextView
from harness.report.views.verdict import build_verdict_view
from harness.rundir.verdict import Verdict


@dataclass(frozen=True)
class Section:
    title: str
    body: str  # HTML
    subtitle: str = ""


class Figures:
    """Numbers each figure's <div> (ids unique on the page)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, fig: go.Figure, wide: bool = False) -> str:
        self.count += 1
        cls = "figure wide" if wide else "figure"
        return f'<div class="{cls}">{figure_div(fig, f"fig-{self.count}")}</div>'


SectionWriter = Callable[[Analysis, Verdict, Figures], Section]


def _grid(items: list[str]) -> str:
    return f'<div class="figure-grid">{"".join(items)}</div>' if items else ""


def _note(text: str) -> str:
    return f'<p class="note">{escape(text)}</p>'


def verdict_section(a: Analysis, v: Verdict, fig: Figures) -> Section:
    view = build_verdict_view(a, v)
    # One line a reason: an unfinished verdict's causes and its command stay whole.
    reasons = "<br>".join(escape(r) for r in view.reasons)
    statuses = "".join(f"<li><b>{escape(n)}</b>: {escape(s)}</li>" for n, s in view.statuses)
    body = [
        f'<p class="verdict" style="color:{view.colour}">{escape(view.word)}</p>',
        f"<p>{reasons}</p>",
        f'<ul class="bars">{statuses}</ul>',
    ]
    if view.notice:
        body.append(f'<pre class="text notice">{escape(chr(10).join(view.notice))}</pre>')
    figures = []
    for panel in view.panels:
        figures += [fig(speed.speedup_figure(panel)), fig(speed.factors_figure(panel))]
    body.append(_grid(figures) or _note("no speed task"))
    body += [
        "<h3>The bars</h3>",
        lines_html(view.bar_lines),
        "<h3>Bar evidence</h3>",
        _note("every figure each bar used, as written to verdict.json"),
        lines_html(view.evidence_lines),
    ]
    return Section(view.title, "\n".join(body), " | ".join(view.about))


def speedup_section(a: Analysis, v: Verdict, fig: Figures) -> Section:
    view = build_speedups_view(a, v)
    items = [fig(speed.speedup_figure(panel)) for panel in view.panels]
    return Section(view.title, _grid(items) or _note("no speed task"), view.subtitle)


def decomposition_section(a: Analysis, v: Verdict, fig: Figures) -> Section:
    view = build_decomposition_view(a, v)
    body = []
    for task in view.tasks:
        body += [
            f"<h3>{escape(task.title)}</h3>",
            fig(speed.decomposition_figure(task.panel), wide=True),
            lines_html(task.lines),
        ]
    return Section(view.title, "\n".join(body) or _note("no speed task"), view.subtitle)


def category_section(a: Analysis, v: Verdict, fig: Figures) -> Section:
    view = build_categories_view(a, v)
    if view.none:
        return Section(view.title, _note(view.none))
    body = []
    for t in view.tasks:
        body.append(f"<h3>{escape(t.title)}</h3>")
        if t.unavailable:
            body.append(_note(t.unavailable))
            continue
        body += [
            _note(t.subtitle),
            fig(speed.category_figure(a, t), wide=True),
            lines_html(t.table_lines),
        ]
    if view.lengths is not None:
        body += [
            f"<h3>{escape(view.lengths.title)}</h3>",
            fig(speed.input_length_figure(a, view.lengths), wide=True),
        ]
    return Section(view.title, "\n".join(body), view.subtitle)


def surface_section(a: Analysis, v: Verdict, fig: Figures) -> Section:
    view = build_surface_view(a, v)
    if not view.registered:
        return Section(view.title, _note("the study registers no round-cost surface"))
    body = []
    for task in view.tasks:
        body += [
            f"<h3>task {escape(task.task)}</h3>",
            fig(surface.surface_figure(a, view, task), wide=True),
            lines_html(task.lines),
        ]
        if task.verification is not None:
            body += [
                f"<h3>{escape(task.verification.title)}</h3>",
                fig(surface.verification_figure(view, task.verification), wide=True),
                lines_html(task.verification.lines),
            ]
    return Section(view.title, "\n".join(body), view.subtitle)


def speed_curves_section(a: Analysis, v: Verdict, fig: Figures) -> Section:
    view = build_speed_curves_view(a, v)
    items = [fig(speed.speed_curves_figure(view, t), wide=True) for t in view.tasks]
    return Section(view.title, "\n".join(items) or _note("no speed task"), view.subtitle)


def acceptance_section(a: Analysis, v: Verdict, fig: Figures) -> Section:
    view = build_acceptance_view(a, v)
    body = []
    for arm in view.arms:
        body.append(f"<h3>{escape(arm.heading)}</h3>")
        body.append(
            _grid([fig(cells.acceptance_figure(view, arm, t)) for t in arm.tasks])
            or _note("no speed task")
        )
    return Section(view.title, "\n".join(body) or _note("no drafter arm"), view.subtitle)


def consistency_section(a: Analysis, v: Verdict, fig: Figures) -> Section:
    view = build_consistency_view(a, v)
    return Section(view.title, fig(cells.consistency_figure(a, view), wide=True), view.subtitle)


def accuracy_section(a: Analysis, v: Verdict, fig: Figures) -> Section:
    view = build_accuracy_view(a, v)
    return Section(
        view.title,
        fig(cells.accuracy_figure(a, view), wide=True)
        + "<h3>Paired comparisons</h3>"
        + lines_html(view.paired_lines),
        view.subtitle,
    )


def open_loop_section(a: Analysis, v: Verdict, fig: Figures) -> Section:
    view = build_open_loop_view(a, v)
    if not view.registered:
        return Section(view.title, _note(view.subtitle))
    body = fig(cells.open_loop_figure(view), wide=True) + lines_html(view.fleet_lines)
    return Section(view.title, body, view.subtitle)


def gpu_section(a: Analysis, v: Verdict, fig: Figures) -> Section:
    view = build_gpu_view(a, v)
    if view.why_none:
        return Section(view.title, _note(view.why_none), view.subtitle)
    return Section(
        view.title,
        fig(cells.gpu_figure(view), wide=True)
        + f"<h3>Per cell</h3>{_note(view.cell_subtitle)}"
        + lines_html(view.cell_lines),
        view.subtitle,
    )


def _text(build: Callable[[Analysis, Verdict], TextView]) -> SectionWriter:
    def write(a: Analysis, v: Verdict, fig: Figures) -> Section:
        view = build(a, v)
        return Section(view.title, lines_html(view.lines), view.subtitle)

    return write


# Section id -> its HTML section.
HTML_SECTIONS: dict[str, SectionWriter] = {
    "verdict": verdict_section,
    "speedups": speedup_section,
    "decomposition": decomposition_section,
    "categories": category_section,
    "surface": surface_section,
    "speed-curves": speed_curves_section,
    "acceptance": acceptance_section,
    "consistency": consistency_section,
    "accuracy": accuracy_section,
    "open-loop": open_loop_section,
    "gpu": gpu_section,
    **{section: _text(build) for section, build in TEXT_VIEWS.items()},
}


def report_sections(a: Analysis, v: Verdict) -> list[tuple[str, Section]]:
    fig = Figures()
    return [(section, HTML_SECTIONS[section](a, v, fig)) for section in SECTION_ORDER]
