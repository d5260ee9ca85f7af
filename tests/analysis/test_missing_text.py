"""pandas 3 holds a text column's missing entries as NaN, which is truthy and not None: a
row model's text field reads them as None, so `r.reason or ""`, `r.rerun_of is None` and
`if r.interval_caveat` mean what they say."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.analysis.frame import rows_of, text_fields
from harness.analysis.tables import analyse
from harness.report.views.intervals import interval_lines
from tests.analysis.runfolder import RunBuilder, study_dict


@dataclass(frozen=True)
class _Row:
    name: str
    note: str | None
    figure: float | None
    count: int | None


def test_a_missing_text_reads_none_and_a_missing_figure_stays_nan() -> None:
    df = pd.DataFrame(
        {"name": ["a", "b"], "note": ["x", None], "figure": [1.0, None], "count": [1, 2]}
    )
    assert isinstance(df.loc[1, "note"], float)  # what pandas itself hands back
    rows = rows_of(df, _Row)
    assert rows[0].note == "x" and rows[1].note is None
    assert math.isnan(rows[1].figure)  # type: ignore[arg-type]
    assert text_fields(_Row) == {"name", "note"}


def test_first_measured_cells_leave_out_only_the_reruns(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path / "run")
    b.speed_cells(levels=[1, 2], tasks=("chat",))
    b.speed("vllm-base", "chat", 1, 44.0, cell_id="vllm-base/chat/speed/c001/rerun1")
    a = analyse(b.root)
    every = a.cell_rows()
    first = a.cell_rows(first_measured=True)
    assert [r.cell_id for r in every if r.cell_id not in {f.cell_id for f in first}] == [
        "vllm-base/chat/speed/c001/rerun1"
    ]
    assert all(r.rerun_of is None for r in first)


def test_only_the_intervals_with_a_caveat_are_counted_marked(tmp_path: Path) -> None:
    # Three sessions: the intervals of the cells with 20 requests or more carry no caveat.
    b = RunBuilder(tmp_path / "run", study_dict(sessions=3))
    b.full_passing_run()
    a = analyse(b.root)
    usable = a.speedups_of(usable=True)
    caveats = [r for r in usable if r.interval_caveat is not None]
    assert (len(caveats), len(usable)) == (12, 30)
    assert "12 of 30 intervals are marked" in " ".join(interval_lines(a))
