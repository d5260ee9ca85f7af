"""A group-sequential design's looks, as the run folder keeps them: the manifest's log of
each look (`LookRecord`: the bars decided there, the cells not measured after it) and
verdict.json's `design` (`DesignSummary`: per bar, the look of N that decided it and by
which boundary, and the GPU-hours spent against the fixed design's). Decided by
harness.run.schedule through harness.analysis.sequential; summed up by the latter."""

from __future__ import annotations

from typing import Literal

from harness.rundir.record import RunRecord


class LookDecision(RunRecord):
    """A bar (or a part of it: a task, "arm/task" for the knee) decided at a look."""

    bar: str
    part: str  # "" the bar as a whole
    outcome: str  # its status at both ends of the repeated intervals


class LookRecord(RunRecord):
    """One look: after `look` of `of` sessions of a plan stage's cells."""

    stage: int
    look: int
    of: int
    level: float  # the repeated intervals' nominal level at this look
    decided: list[LookDecision]  # decided here for the first time
    skipped: list[str]  # the later sessions' cells not measured because of it
    judged_wall: float


class DecidedBar(RunRecord):
    """When a registered bar was decided: at an interim look by the repeated interval, or
    at the last look on the point estimate (as the fixed design reads it)."""

    bar: str
    outcome: str  # the verdict's status of the bar
    stage: int
    look: int
    of: int
    boundary: Literal["interval", "final"]
    line: str


class DesignSummary(RunRecord):
    """verdict.json's `design` under a group-sequential design."""

    kind: str
    spending: str
    sessions: int
    looks: list[int]
    levels: dict[str, float]  # each look's repeated-interval level ("2": 0.9836)
    bars: list[DecidedBar]
    skipped_cells: list[str]  # not measured because a look decided their bars
    gpu_hours: float  # the plan's roofline estimate of what this run measured
    gpu_hours_fixed: float  # and of what the fixed design would have measured
    lines: list[str]  # what the verdict page prints
