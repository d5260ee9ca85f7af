"""A group-sequential design's looks, as the run folder keeps them: the manifest's log of
each look (`LookRecord`: the bars decided there, the cells not measured after it) and
verdict.json's `design` (`DesignSummary`: per bar, the look of N that decided it and by
which boundary, and the GPU-hours spent against the fixed design's). Decided by
harness.run.schedule through harness.analysis.sequential; summed up by harness.analysis.design."""

from __future__ import annotations

from typing import Literal

from harness.rundir.record import RunRecord


class LookDecision(RunRecord):
    """A bar (or a part of it: a task, "arm/task" for the knee) decided at a look."""

    bar: str  # pass.speed | stop | check | pass.knee
    part: str  # "" the bar as a whole
    outcome: str  # its status at both ends of the repeated intervals


class LookRecord(RunRecord):
    """One look: after `look` of `of` sessions of a plan stage's cells."""

    stage: int  # the plan stage whose sessions it follows
    look: int  # sessions of that stage measured
    of: int  # recording.sessions
    level: float  # the repeated intervals' nominal level at this look
    decided: list[LookDecision]  # decided here for the first time
    skipped: list[str]  # the later sessions' cells not measured because of it
    judged_wall: float


class DecidedBar(RunRecord):
    """When a registered bar was decided: at an interim look by the repeated interval, or
    at the last look on the point estimate (as the fixed design reads it)."""

    bar: str  # pass.speed | stop | check | pass.knee
    outcome: str  # the verdict's status of the bar
    stage: int  # the plan stage of the look
    look: int  # the look (sessions) it was decided at
    of: int  # recording.sessions
    boundary: Literal["interval", "final"]  # its repeated intervals, or the last look's points
    line: str  # what the verdict page prints


class DesignSummary(RunRecord):
    """verdict.json's `design` under a group-sequential design."""

    kind: str  # group_sequential (design.kind)
    spending: str  # design.spending
    sessions: int  # recording.sessions: the last look
    looks: list[int]  # the sessions after which the bars were read
    levels: dict[str, float]  # each look's repeated-interval level ("2": 0.9836)
    bars: list[DecidedBar]  # pass.speed, stop, check, pass.knee: when each was decided
    skipped_cells: list[str]  # not measured because a look decided their bars
    gpu_hours: float  # the plan's roofline estimate of what this run measured
    gpu_hours_fixed: float  # and of what the fixed design would have measured
    lines: list[str]  # what the verdict page prints
