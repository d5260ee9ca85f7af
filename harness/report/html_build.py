"""The HTML report of a run (reports/<run>.html beside the PDF): the PDF's sections in the
PDF's order, figures you can hover and zoom (plotly), tables as HTML tables, in one file
that needs no network."""

from __future__ import annotations

import warnings
from pathlib import Path

from harness.analysis.tables import Analysis
from harness.report.html_page import html_page, write_page
from harness.report.html_sections import report_sections
from harness.rundir.verdict import Verdict


def html_report(a: Analysis, verdict: Verdict) -> str:
    with warnings.catch_warnings():
        # Empty panels (a task with no usable cells) are labelled, not warned about.
        warnings.simplefilter("ignore", RuntimeWarning)
        sections = report_sections(a, verdict)
    return html_page(
        f"specbench report: {a.run.run_id}",
        f"{a.run.study.title} | verdict {verdict.verdict} | seal {verdict.seal}",
        [(i, s.title, s.subtitle, s.body) for i, s in sections],
    )


def write_html(a: Analysis, verdict: Verdict, out_html: Path) -> Path:
    return write_page(html_report(a, verdict), Path(out_html))


def html_path(out_pdf: Path) -> Path:
    """The HTML report beside its PDF: reports/<run>.pdf -> reports/<run>.html."""
    return Path(out_pdf).with_suffix(".html")
