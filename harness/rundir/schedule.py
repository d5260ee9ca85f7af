"""The schedule as the manifest keeps it: the cells skipped, failed and rerun, the stop
decision, the engine sessions, the smoke's outcome and the schedule verification's k
schedules (harness.run.schedule decides them)."""

from __future__ import annotations

from typing import Any, Literal

from harness.rundir.record import RunRecord


class SkippedCell(RunRecord):
    cell: str
    reason: str


class FailedCell(RunRecord):
    cell: str
    reason: str
    shard: str | None = None
    shard_worker: int | None = None


class RerunRecord(RunRecord):
    """A check-bar rerun of a baseline cell (`cell` is the rerun's id, `of` the original)."""

    cell: str
    of: str
    reason: str
    when: float


class StopDecisionRecord(RunRecord):
    """The stop bar, judged after stage 1 (harness.run.schedule)."""

    fired: bool | None
    judged_wall: float
    evidence: dict[str, Any]  # the stop bar's evidence (harness.analysis.stop_check)


class SessionRecord(RunRecord):
    """A registered engine session: the cells one engine start measured."""

    stage: int
    session: int
    arm: str
    cells: list[str]
    started_wall: float
    shard: str | None = None
    shard_worker: int | None = None


SmokeStatus = Literal["running", "passed", "failed", "off"]


class SmokeSummary(RunRecord):
    """The smoke stage's outcome (harness.run.smoke; a sharded run's: every shard's)."""

    status: SmokeStatus
    order: list[str] | None = None
    smoked_now: list[str] | None = None
    started_wall: float | None = None
    ended_wall: float | None = None
    # where it failed
    arm: str | None = None
    reason: str | None = None
    log_line: str | None = None
    # a sharded run: each shard's status
    shards: dict[str, str | None] | None = None


# --- the schedule verification -------------------------------------------------------------


class ScheduledLevel(RunRecord):
    """One surface level of a proposed k schedule: the k chosen and its prediction."""

    concurrency: int
    k: int
    predicted_speedup: float
    ci_lower: float | None
    ci_upper: float | None


class KScheduleRecord(RunRecord):
    """A k schedule proposed from the surface (harness.analysis.k_schedule), for one task,
    as the verification arm runs it."""

    arm: str
    task: str
    ranges: list[tuple[int, int | None, int]]  # inclusive [first, last (None: open), k]
    levels: list[ScheduledLevel]
    setting: str  # the drafter engine's own spelling (EngineKind.k_schedule_setting)
    proposed_wall: float
