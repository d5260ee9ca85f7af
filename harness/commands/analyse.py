"""`specbench analyse RUN`: the run's tables and verdict, printed; no PDF."""

from __future__ import annotations

import argparse

from rich.console import Console

from harness.calibration import run_hardware
from harness.commands.output import add_format_option, print_json, write_table
from harness.commands.report import resolve_run
from harness.commands.run_folder import add_results_option
from harness.numbers import number_text


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "analyse",
        help="print a run's speedups, knees and verdict (writes the"
        " tables and verdict.json into the run folder)",
    )
    p.add_argument("run", help="run id (under --results) or run folder")
    add_results_option(p)
    add_format_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from harness.analysis.rows import KneeRow
    from harness.finalize import finalize_run

    root = resolve_run(args.run, args.results)
    done = finalize_run(root)
    a, verdict = done.analysis, done.verdict
    fmt = getattr(args, "format", "table")
    if fmt == "csv":  # the whole speedups table, decomposition and prediction included
        sp = a.speedups
        write_table(list(sp.columns), sp.itertuples(index=False, name=None), fmt)
        return 0
    if fmt == "json":
        print_json(
            {
                "speedups": a.speedups.to_dict(orient="records"),
                "knees": a.knees.to_dict(orient="records"),
                "verdict": verdict.to_json(),
            }
        )
        return 0
    console = Console(highlight=False, soft_wrap=True)
    level = a.run.study.bars.intervals.level
    headers = [
        "task",
        "arm",
        "c",
        "speedup",
        "interval",
        "tok/round",
        "cost",
        "explained",
        "predicted",
        "drafter tok/s",
        "baseline tok/s",
        "status",
    ]
    rows = [
        [
            r.task,
            r.arm,
            r.concurrency,
            number_text(r.speedup),
            f"[{number_text(r.ci_lower)}, {number_text(r.ci_upper)}]" if r.status == "ok" else "-",
            number_text(r.tokens_per_round),
            number_text(r.round_cost_ratio),
            number_text(r.explained_speedup) + (" FLAG" if r.decomposition_flag is True else ""),
            number_text(r.predicted_speedup),
            number_text(r.speed_drafter, ".1f"),
            number_text(r.speed_baseline, ".1f"),
            r.status,
        ]
        for r in a.speedups_of()
    ]
    write_table(
        headers,
        rows,
        fmt,
        right=("c", "speedup"),
        title=f"speedups (median per-user speed ratio, {level:.0%} bootstrap interval;"
        " speedup = tok/round over the baseline's / cost):",
    )
    console.print(
        f"predicted on the {run_hardware(a.run.study, a.run.manifest).line()}", markup=False
    )
    print()
    write_table(
        ["task", "arm", "knee", "note"],
        [[k.task, k.arm, k.label, k.note] for k in a.rows("knees", KneeRow)],
        fmt,
        title="knee (the point speedup crosses 1.0, interpolated in log2 users; interval from the bounds' crossings):",
    )
    for p in verdict.speculation_pays:
        console.print(
            f"speculation pays: {p.arm} / {p.task}: {p.label}"
            + (f"; gate: {p.gate}" if p.gate else ""),
            markup=False,
        )
    console.print(f"[bold]verdict: {verdict.verdict}[/bold]  ({root / 'verdict.json'})")
    for bar in verdict.bars:
        console.print(f"  {bar.name}: {bar.status}")
        for line in bar.summary:
            console.print(f"      {line}")
    for e in verdict.excluded_cells:
        console.print(f"  excluded: {e.cell}: {e.reason}")
    return 0
