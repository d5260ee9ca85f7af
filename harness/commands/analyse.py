"""`specbench analyse RUN`: the run's tables and verdict, printed; no PDF."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from rich.console import Console
from rich.table import Table

from harness.commands.report import resolve_run
from harness.paths import RESULTS_DIR


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("analyse", help="print a run's speedups, knees and verdict (writes the"
                       " tables and verdict.json into the run folder)")
    p.add_argument("run", help="run id (under --results) or run folder")
    p.add_argument("--results", type=Path, default=RESULTS_DIR, help="where run folders are")
    p.set_defaults(func=run)


def _f(v: object, spec: str = ".2f") -> str:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return "-" if v is None else str(v)
    return "-" if math.isnan(x) else format(x, spec)


def run(args: argparse.Namespace) -> int:
    from harness.finalize import finalize_run

    root = resolve_run(args.run, args.results)
    done = finalize_run(root)
    a, verdict = done.analysis, done.verdict
    console = Console(highlight=False)
    level = a.run.study.bars.intervals.level
    table = Table(title=f"speedups (median per-user speed ratio, {level:.0%} bootstrap interval)",
                  show_edge=False)
    for col in ("task", "arm", "c", "speedup", "interval", "drafter tok/s", "baseline tok/s",
                "status"):
        table.add_column(col, justify="right" if col in ("c", "speedup") else "left")
    for r in a.speedups.itertuples():
        table.add_row(r.task, r.arm, str(r.concurrency), _f(r.speedup),
                      f"[{_f(r.ci_lower)}, {_f(r.ci_upper)}]" if r.status == "ok" else "-",
                      _f(r.speed_drafter, ".1f"), _f(r.speed_baseline, ".1f"), r.status)
    console.print(table)
    knees = Table(title="knee (interval's lower bound reaches 1.0)", show_edge=False)
    for col in ("task", "arm", "knee", "note"):
        knees.add_column(col)
    for k in a.knees.itertuples():
        knees.add_row(k.task, k.arm, k.label, k.note)
    console.print(knees)
    console.print(f"[bold]verdict: {verdict['verdict']}[/bold]  ({root / 'verdict.json'})")
    for bar in verdict["bars"]:
        console.print(f"  {bar['name']}: {bar['status']}")
        for line in bar["summary"]:
            console.print(f"      {line}")
    for e in verdict["excluded_cells"]:
        console.print(f"  excluded: {e['cell']}: {e['reason']}")
    return 0
