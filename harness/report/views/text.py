"""The sections that are text and tables only: the PDF prints their lines on text pages
(layout.text_pages), the HTML as paragraphs and tables (html_text.lines_html)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness.analysis.tables import Analysis
from harness.report.views.environment import environment_lines
from harness.report.views.identity import identity_lines
from harness.report.views.intervals import interval_lines
from harness.report.views.load import delivered_load_lines
from harness.report.views.three_figures import three_figures_lines
from harness.rundir.verdict import Verdict


@dataclass(frozen=True)
class TextView:
    title: str
    lines: list[str]
    subtitle: str = ""


def build_intervals_view(a: Analysis, v: Verdict) -> TextView:
    return TextView("Speedup intervals: sessions and what they rest on", interval_lines(a))


def build_three_figures_view(a: Analysis, v: Verdict) -> TextView:
    return TextView("Acceptance: three figures side by side", three_figures_lines(a))


def build_identity_view(a: Analysis, v: Verdict) -> TextView:
    return TextView("Greedy identity", identity_lines(a))


def build_delivered_load_view(a: Analysis, v: Verdict) -> TextView:
    return TextView(
        "Delivered load",
        delivered_load_lines(a),
        "registered users vs requests kept in flight, per closed-loop cell",
    )


def build_environment_view(a: Analysis, v: Verdict) -> TextView:
    return TextView("Environment, seal and deviations", environment_lines(a, v))


# Section id -> its view, for the sections of text alone.
TEXT_VIEWS: dict[str, Callable[[Analysis, Verdict], TextView]] = {
    "intervals": build_intervals_view,
    "three-figures": build_three_figures_view,
    "identity": build_identity_view,
    "delivered-load": build_delivered_load_view,
    "environment": build_environment_view,
}
