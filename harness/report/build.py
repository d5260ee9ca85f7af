"""Assemble the report's pages, in the sections' order (views.SECTION_ORDER), into one PDF."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

from harness.analysis.tables import Analysis
from harness.atomic import atomic_path
from harness.report.layout import PdfPages, text_pages
from harness.report.pages_acceptance import acceptance_pages, consistency_page
from harness.report.pages_categories import category_pages
from harness.report.pages_decompose import decomposition_pages
from harness.report.pages_gpu import gpu_pages
from harness.report.pages_headline import verdict_page
from harness.report.pages_open import open_loop_page
from harness.report.pages_quality import accuracy_pages
from harness.report.pages_speed import speed_curve_pages, speedup_pages
from harness.report.pages_surface import surface_pages
from harness.report.views import SECTION_ORDER
from harness.report.views.text import TEXT_VIEWS, TextView
from harness.rundir.verdict import Verdict

PageWriter = Callable[[PdfPages, Analysis, Verdict], int]


def _text(build: Callable[[Analysis, Verdict], TextView]) -> PageWriter:
    def write(pdf: PdfPages, a: Analysis, verdict: Verdict) -> int:
        view = build(a, verdict)
        return text_pages(pdf, view.title, view.lines, view.subtitle or None)

    return write


# Section id -> the pages that draw it.
PDF_PAGES: dict[str, PageWriter] = {
    "verdict": verdict_page,
    "speedups": speedup_pages,
    "decomposition": decomposition_pages,
    "categories": category_pages,
    "surface": surface_pages,
    "speed-curves": speed_curve_pages,
    "acceptance": acceptance_pages,
    "consistency": consistency_page,
    "accuracy": accuracy_pages,
    "open-loop": open_loop_page,
    "gpu": gpu_pages,
    **{section: _text(build) for section, build in TEXT_VIEWS.items()},
}


def write_pdf(a: Analysis, verdict: Verdict, out_pdf: Path) -> int:
    """Every page; returns the page count."""
    pages = 0
    with warnings.catch_warnings(), atomic_path(out_pdf) as tmp:
        # Empty panels (a task with no usable cells) are drawn and labelled, not warned about.
        warnings.simplefilter("ignore", UserWarning)
        with PdfPages(tmp) as pdf:
            for section in SECTION_ORDER:
                pages += PDF_PAGES[section](pdf, a, verdict)
            info = pdf.infodict()
            info["Title"] = f"specbench report: {a.run.run_id}"
            info["Subject"] = a.run.study.title
    return pages
