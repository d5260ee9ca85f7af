"""The pass bar's best drafter (harness.analysis.speedup.best_drafter) on hand-made tables."""

from __future__ import annotations

import pandas as pd

from harness.analysis.frame import rows_of
from harness.analysis.rows import SpeedupRow
from harness.analysis.speedup import best_drafter


def rows(*figures: tuple[str, str, int, str, float]) -> list[SpeedupRow]:
    return rows_of(
        pd.DataFrame(
            [
                {"arm": arm, "task": task, "concurrency": c, "status": status, "speedup": speedup}
                for arm, task, c, status, speedup in figures
            ]
        ),
        SpeedupRow,
    )


def test_the_highest_minimum_wins_and_ties_go_to_the_first_arm() -> None:
    table = rows(
        ("a", "chat", 1, "ok", 2.0),
        ("a", "chat", 2, "ok", 1.4),
        ("b", "chat", 1, "ok", 1.6),
        ("b", "chat", 2, "ok", 1.5),
        ("c", "chat", 1, "ok", 1.5),
        ("c", "chat", 2, "ok", 1.9),
    )
    best = best_drafter(table, ["chat"], [1, 2], "speedup")
    assert best.arm == "b" and best.minima == {"a": 1.4, "b": 1.5, "c": 1.5}
    assert best.missing == []


def test_a_drafter_without_a_usable_row_leaves_it_undetermined() -> None:
    table = rows(("a", "chat", 1, "ok", 2.0), ("b", "chat", 1, "invalid", 3.0))
    best = best_drafter(table, ["chat"], [1], "speedup")
    assert best.arm is None and best.minima == {"a": 2.0, "b": None}
    assert best.missing == ["b/chat c=1: invalid"]


def test_a_drafter_with_no_row_at_the_levels_is_named_not_a_type_error() -> None:
    # Arm b has figures on another task only: it was a None beside a's 2.0 in max().
    table = rows(("a", "chat", 1, "ok", 2.0), ("b", "code", 1, "ok", 1.2))
    best = best_drafter(table, ["chat"], [1], "speedup")
    assert best.arm is None and best.minima == {"a": 2.0, "b": None}
    assert best.missing == ["b: no row on task(s) chat at [1]"]
