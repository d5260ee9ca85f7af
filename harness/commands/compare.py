"""`specbench compare RUN_A RUN_B`: two runs side by side (harness/analysis/compare.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.commands.output import add_format_option, print_json, write_table
from harness.commands.report import resolve_run
from harness.commands.run_folder import add_results_option
from harness.numbers import number_text


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare",
        help="two runs side by side: each speedup with its interval,"
        " B's over A's with an interval, which arm moved, what differs",
    )
    p.add_argument("run_a", help="run id (under --results) or run folder")
    p.add_argument("run_b", help="run id (under --results) or run folder")
    add_results_option(p)
    add_format_option(p)
    p.add_argument(
        "--html",
        type=Path,
        metavar="PATH",
        help="also write the comparison as a self-contained HTML page there",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from harness.analysis.compare import (
        compare_speedups,
        environment_differences,
        family_label,
        family_summary,
        interval_label,
        read_run,
        row_warnings,
    )

    a = read_run(resolve_run(args.run_a, args.results))
    b = read_run(resolve_run(args.run_b, args.results))
    rows = compare_speedups(a, b)
    env = environment_differences(a, b)
    warnings, family = row_warnings(rows), family_summary(rows, a.level)
    if getattr(args, "html", None) is not None:
        from harness.report.html_compare import compare_page
        from harness.report.html_page import write_page

        page = write_page(compare_page(rows, env, a.run_id, b.run_id, a.level), args.html)
        print(f"html: {page}", file=sys.stderr)  # stdout stays the table, csv or json
    fmt = getattr(args, "format", "table")
    if fmt == "csv":
        write_table(list(rows.columns), rows.itertuples(index=False, name=None), fmt)
        return 0
    if fmt == "json":
        print_json(
            {
                "run_a": a.run_id,
                "run_b": b.run_id,
                "level": a.level,
                # NaN is not JSON: a missing figure is null
                "rows": rows.astype(object).where(rows.notna(), None).to_dict(orient="records"),
                "warnings": warnings,
                "family_wise": family,
                "environment_differences": [{"what": k, "a": x, "b": y} for k, x, y in env],
            }
        )
        return 0
    headers = [
        "task",
        "arm",
        "c",
        "A speedup",
        "B speedup",
        "B/A",
        "interval",
        "test",
        "family-wise",
        "tok/round A/B",
        "cost A/B",
        "which arm moved",
        "status",
    ]
    table = [
        [
            r.task,
            r.arm,
            r.concurrency,
            f"{number_text(r.speedup_a)} [{number_text(r.ci_lower_a)}, {number_text(r.ci_upper_a)}]",
            f"{number_text(r.speedup_b)} [{number_text(r.ci_lower_b)}, {number_text(r.ci_upper_b)}]",
            number_text(r.ratio, ".3f"),
            f"[{number_text(r.ratio_lower, '.3f')}, {number_text(r.ratio_upper, '.3f')}]",
            interval_label(r),
            family_label(r),
            f"{number_text(r.tokens_per_round_a)} / {number_text(r.tokens_per_round_b)}",
            f"{number_text(r.round_cost_ratio_a)} / {number_text(r.round_cost_ratio_b)}",
            r.moved,
            r.status,
        ]
        for r in rows.itertuples()
    ]
    for line in warnings:
        print(line)
    write_table(
        headers,
        table,
        fmt,
        right=("c", "B/A"),
        title=f"A = {a.run_id}, B = {b.run_id}: speedups with their {a.level:.0%}"
        " intervals; B/A with a t interval on the runs' session log ratios",
    )
    print(family)
    print()
    if env:
        write_table(
            ["what differs", "A", "B"],
            [list(e) for e in env],
            fmt,
            title="environment (manifest.json):",
        )
    else:
        print("environment: nothing recorded differs (seal, host, engine versions and settings)")
    return 0
