"""`specbench report RUN`: rebuild a run's tables, verdict and reports (the PDF, and the
HTML one beside it) from its folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.commands.run_folder import add_results_option
from harness.errors import InputError
from harness.paths import REPORTS_DIR


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report", help="rebuild a run's tables, verdict.json and reports (PDF, and HTML beside it)"
    )
    p.add_argument("run", help="run id (under --results) or run folder")
    p.add_argument(
        "--out",
        type=Path,
        help="the PDF to write (default: reports/<run-id>.pdf); the HTML report goes beside it",
    )
    add_results_option(p)
    p.set_defaults(func=run)


def resolve_run(run: str, results: Path) -> Path:
    """A run folder given as a path or as an id under the results folder."""
    path = Path(run)
    for candidate in (path, results / run):
        if (candidate / "manifest.json").exists():
            return candidate
    raise InputError(f"{run}: not a run folder (no manifest.json there or under {results})")


def run(args: argparse.Namespace) -> int:
    from harness.finalize import finalize_run

    root = resolve_run(args.run, args.results)
    done = finalize_run(root)
    out = args.out or REPORTS_DIR / f"{done.analysis.run.run_id}.pdf"
    done = done.with_report(out)
    for path in done.tables:
        print(f"table: {path}")
    print(f"verdict: {done.verdict.verdict} ({root / 'verdict.json'})")
    print(f"report: {out} ({done.pages} pages)")
    print(f"html report: {done.html}")
    return 0
