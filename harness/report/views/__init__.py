"""What each report section shows, computed once from the analysis and verdict: its title,
text, table rows and figure series, as one small typed view per section. The PDF
(report/build.py, pages_*.py) and the HTML (report/html_sections.py) both render the views
in SECTION_ORDER, so a new section is one view and two small render functions."""

from __future__ import annotations

from harness.analysis.tables import Analysis

# The report's sections in reading order, by the id the HTML page anchors them at.
SECTION_ORDER: tuple[str, ...] = (
    "verdict",
    "speedups",
    "intervals",
    "decomposition",
    "categories",
    "surface",
    "speed-curves",
    "acceptance",
    "consistency",
    "three-figures",
    "accuracy",
    "identity",
    "open-loop",
    "delivered-load",
    "gpu",
    "environment",
)


def arm_colours(a: Analysis) -> dict[str, str]:
    palette = [
        "#1f77b4",
        "#d62728",
        "#2ca02c",
        "#9467bd",
        "#ff7f0e",
        "#8c564b",
        "#e377c2",
        "#17becf",
        "#bcbd22",
        "#7f7f7f",
    ]
    return {arm.name: palette[i % len(palette)] for i, arm in enumerate(a.run.study.arms)}
