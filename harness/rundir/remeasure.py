"""Cells measured again after they ended invalid, as the run folder keeps them: the
manifest's log of `specbench run --resume --remeasure-invalid` (`RemeasureRecord`), and
what verdict.json says of an unfinished run and of the cells measured again
(`Unfinished`, `RemeasuredCell`). Decided by harness.run.remeasure; read into the verdict
by harness.analysis.unfinished.
"""

from __future__ import annotations

from harness.rundir.record import RunRecord


class RemeasureRecord(RunRecord):
    """One cell `--remeasure-invalid` gave a fresh `recording.cell_retries` budget: when,
    and why it had been invalid (its kept attempt's reason and causes)."""

    cell: str
    when: float  # the resume's wall clock as it decided
    causes: list[str]  # harness.derived.usable.CauseKind, each one that passes
    reason: str  # as its attempt recorded it
    attempts_before: int  # attempts that had measured to their end before the new budget
    # The cells a bar reads it against, kept as they were measured (never measured again
    # for it: docs, "A pair stays a pair").
    partners: list[str]


class CauseCount(RunRecord):
    """One cause of an unfinished verdict: how many cells, the range of their figures,
    and how many of them each bar would have read."""

    cause: str  # CauseKind
    cells: list[str]
    low: float | None
    high: float | None
    limit: float | None
    per_bar: dict[str, int]
    passes: bool  # --remeasure-invalid measures these again
    line: str


class Unfinished(RunRecord):
    """Why an INCOMPLETE verdict is unfinished and the one command that finishes it
    (None: no command can; `lines` say what would)."""

    causes: list[CauseCount]
    command: str | None
    lines: list[str]  # the text the terminal, verdict.json's reasons and both reports show


class RemeasuredCell(RunRecord):
    """A cell measured again, as the verdict page lists it."""

    cell: str
    when: float
    causes: list[str]
    reason: str
    attempts_before: int
    attempts_after: int  # attempts measured to their end since, this cell's
    status: str  # the cell now: complete (valid), invalid, missing
    partners: list[str]
    line: str
