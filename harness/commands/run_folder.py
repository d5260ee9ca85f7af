"""The options naming where run folders are and which one a command writes, declared once
for every command that takes them (the command reference is generated from them)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.paths import REPORTS_DIR, RESULTS_DIR


def add_results_option(p: argparse.ArgumentParser, help: str = "where run folders are") -> None:
    p.add_argument("--results", type=Path, default=RESULTS_DIR, help=help)


def add_run_folder_options(p: argparse.ArgumentParser, resume: str) -> None:
    """The options of a command that runs a study (`run`, `rehearse`): a new run folder or
    `--resume` of one, and its report. `resume`: what --resume continues, for its help."""
    p.add_argument(
        "--resume",
        nargs="?",
        const="",
        default=None,
        metavar="RUN",
        help=f"continue {resume}, skipping complete cells",
    )
    p.add_argument(
        "--remeasure-invalid",
        action="store_true",
        help="with --resume: measure again every cell left invalid by a cause that"
        " passes (host busy, client lag, delivered load short, bursts, a dead"
        " engine, GPU throttling under remeasure), each with a fresh"
        " cell_retries budget; every earlier attempt is kept",
    )
    p.add_argument("--run-id", help="name of a new run folder (default: <study>-<time>)")
    add_results_option(p, help="where run folders go")
    p.add_argument(
        "--reports",
        type=Path,
        default=REPORTS_DIR,
        help="where reports go (the PDF, and the HTML one beside it)",
    )
    p.add_argument("--no-report", action="store_true", help="skip the reports at the end")
