"""`specbench report RUN`: rebuild a run's tables, verdict and PDF report from its folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.errors import InputError
from harness.paths import REPORTS_DIR, RESULTS_DIR


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="rebuild a run's tables, verdict.json and PDF report")
    p.add_argument("run", help="run id (under --results) or run folder")
    p.add_argument("--out", type=Path, help="the PDF to write (default: reports/<run-id>.pdf)")
    p.add_argument("--results", type=Path, default=RESULTS_DIR, help="where run folders are")
    p.set_defaults(func=run)


def resolve_run(run: str, results: Path) -> Path:
    """A run folder given as a path or as an id under the results folder."""
    path = Path(run)
    for candidate in (path, results / run):
        if (candidate / "manifest.json").exists():
            return candidate
    raise InputError(f"{run}: not a run folder (no manifest.json there or under {results})")


def run(args: argparse.Namespace) -> int:
    from harness.analysis.bars import write_verdict
    from harness.analysis.tables import analyse, write_tables
    from harness.report.build import write_pdf

    root = resolve_run(args.run, args.results)
    analysis = analyse(root)
    tables = write_tables(analysis)
    verdict = write_verdict(root, analysis=analysis)
    out = args.out or REPORTS_DIR / f"{analysis.run.run_id}.pdf"
    pages = write_pdf(analysis, verdict, out)
    for path in tables:
        print(f"table: {path}")
    print(f"verdict: {verdict['verdict']} ({root / 'verdict.json'})")
    print(f"report: {out} ({pages} pages)")
    return 0
