"""The load each closed-loop cell delivered, beside the users it registers."""

from __future__ import annotations

import math

from harness.analysis.tables import Analysis
from harness.report.layout import table_lines


def delivered_load_lines(a: Analysis) -> list[str]:
    """One row per closed-loop cell: registered users, requests kept in flight, and the
    users' turnaround. A cell below the registered share is invalid (and was remeasured)."""
    floor = a.run.study.recording.min_delivered_share
    limit = a.run.study.recording.lag_limit_p99_ms
    rows = []
    for r in a.cell_rows():
        if r.concurrency is None or r.kind == "open":
            continue
        figures = [
            r.delivered_concurrency,
            r.delivered_share,
            r.turnaround_p50_ms,
            r.turnaround_p99_ms,
            r.turnaround_max_ms,
        ]
        figures = [None if isinstance(v, float) and math.isnan(v) else v for v in figures]
        share = figures[1]
        rows.append(
            [
                r.cell_id,
                int(r.concurrency),
                figures[0],
                "-" if share is None else f"{share:.1%}",
                *figures[2:],
                r.status,
            ]
        )
    lines = [
        f"A closed loop at N users is meant to keep N requests in flight. Delivered: the"
        f" time-averaged requests in flight from the first measured send until the first"
        f" user ran out of requests. A cell below {floor:.0%} of its users, or whose user"
        f" turnaround (a request's end to its user's next send) passes {limit:g} ms at"
        f" p99, is invalid and measured again.",
        "",
    ]
    lines += (
        table_lines(
            [
                "cell",
                "users",
                "delivered",
                "share",
                "turn p50 ms",
                "turn p99 ms",
                "turn max ms",
                "status",
            ],
            rows,
        )
        if rows
        else ["no closed-loop cells"]
    )
    return lines
