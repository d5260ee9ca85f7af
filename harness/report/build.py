"""Assemble the report's pages, in reading order, into one PDF."""

from __future__ import annotations

import warnings
from pathlib import Path

from harness.analysis.tables import Analysis
from harness.atomic import atomic_path
from harness.report.layout import PdfPages
from harness.report.pages_acceptance import (
    acceptance_pages,
    consistency_page,
    three_figures_pages,
)
from harness.report.pages_categories import category_pages
from harness.report.pages_decompose import decomposition_pages
from harness.report.pages_environment import environment_pages
from harness.report.pages_gpu import gpu_pages
from harness.report.pages_load import delivered_load_page
from harness.report.pages_open import open_loop_page
from harness.report.pages_quality import accuracy_pages, identity_pages
from harness.report.pages_sessions import interval_pages
from harness.report.pages_speed import speed_curve_pages, speedup_pages
from harness.report.pages_surface import surface_pages
from harness.report.pages_text import verdict_page
from harness.rundir.verdict import Verdict


def write_pdf(a: Analysis, verdict: Verdict, out_pdf: Path) -> int:
    """Every page; returns the page count."""
    pages = 0
    with warnings.catch_warnings(), atomic_path(out_pdf) as tmp:
        # Empty panels (a task with no usable cells) are drawn and labelled, not warned about.
        warnings.simplefilter("ignore", UserWarning)
        with PdfPages(tmp) as pdf:
            pages += verdict_page(pdf, a, verdict)
            pages += speedup_pages(pdf, a)
            pages += interval_pages(pdf, a)
            pages += decomposition_pages(pdf, a)
            pages += category_pages(pdf, a)
            pages += surface_pages(pdf, a, verdict)
            pages += speed_curve_pages(pdf, a)
            pages += acceptance_pages(pdf, a)
            pages += consistency_page(pdf, a)
            pages += three_figures_pages(pdf, a)
            pages += accuracy_pages(pdf, a)
            pages += identity_pages(pdf, a)
            pages += open_loop_page(pdf, a)
            pages += delivered_load_page(pdf, a)
            pages += gpu_pages(pdf, a)
            pages += environment_pages(pdf, a, verdict)
            info = pdf.infodict()
            info["Title"] = f"specbench report: {a.run.run_id}"
            info["Subject"] = a.run.study.title
    return pages
