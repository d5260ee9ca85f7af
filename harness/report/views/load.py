"""The load each closed-loop cell delivered, beside the users it registers."""

from __future__ import annotations

import math

from harness.analysis.tables import Analysis
from harness.report.layout import table_lines

_COLUMNS = (
    "delivered_concurrency",
    "delivered_share",
    "turnaround_p50_ms",
    "turnaround_p99_ms",
    "turnaround_max_ms",
)


def delivered_load_lines(a: Analysis) -> list[str]:
    """One row per closed-loop cell: registered users, requests kept in flight, and the
    users' turnaround. A cell below the registered share is invalid (and was remeasured)."""
    cells = a.cells[a.cells["concurrency"].notna() & (a.cells["kind"] != "open")]
    floor = a.run.study.recording.min_delivered_share
    limit = a.run.study.recording.lag_limit_p99_ms
    rows = []
    for r in cells.itertuples():
        figures = [getattr(r, c, None) for c in _COLUMNS]
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
