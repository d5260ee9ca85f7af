"""verdict.json, typed: every registered bar's result and the verdict they give, with
what the verdict page reads beside them (excluded, throttled and skipped cells, the
check bar's reruns, where speculation stops paying, control arms, the host's regime).

harness.analysis.bars.evaluate builds a `Verdict`; write_verdict writes it whole; the
commands and the report read it as this model (`read_verdict` for a file). Every key
is written, so in a folder of the current format a key the file lacks, or in any format
one the model does not name, is refused, with the file and the key. A bar's `evidence` stays the bar's own (harness.analysis): the report
prints it as it is; the parts the harness reads again (the reruns) are typed here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from harness.errors import InputError
from harness.rundir.looks import DesignSummary
from harness.rundir.manifest import (
    EVERY_KEY,
    FORMAT_VERSION,
    ControlArmRecord,
    RunRecord,
    since,
    validation_problem,
)
from harness.rundir.remeasure import RemeasuredCell, Unfinished
from harness.rundir.schedule import SkippedCell

VERDICT = "verdict.json"

BarStatus = Literal[
    "pass",
    "fail",
    "not_located",
    "incomplete",
    "not_registered",
    "not_required",
    "fired",
    "not_fired",
    "not_judged",
    "agreed",
    "unresolved",
]
VerdictWord = Literal["PASS", "FAIL", "STOP", "INCOMPLETE"]


class BarRecord(RunRecord):
    name: str
    status: BarStatus
    summary: list[str]
    evidence: dict[str, Any]  # the bar's own (harness.analysis), printed by the report


class ExcludedCell(RunRecord):
    cell: str
    reason: str | None


class ThrottledCell(RunRecord):
    """A cell measured while its GPU throttled (harness.analysis.gpu.throttled_cells)."""

    cell: str
    status: str
    reasons: list[str]
    gpus: list[int]
    samples: int
    throttled_samples: int
    summary: str


class RerunOutcome(RunRecord):
    """The check bar's reading of one baseline rerun against its original."""

    cell: str
    state: str
    of: str | None = None
    original_speed: float | None = None
    rerun_speed: float | None = None
    relative_difference: float | None = None
    agree_within: float | None = None
    agreement: str | None = None
    tolerance: float | None = None
    # repeated sessions: each session's speed, and their spread
    cells: list[str] | None = None
    sessions: list[str] | None = None
    original_session_speeds: list[float] | None = None
    rerun_session_speeds: list[float] | None = None
    session_log_sd: float | None = None
    # not judged yet: what is missing or not finished
    missing: list[str] | None = None
    behind: list[str] | None = None
    # a rerun left invalid: why (before format 4 such a verdict could not be written)
    reason: str | None = Field(None, json_schema_extra=since(4))


class PaysRow(RunRecord):
    """Per drafter and task: the highest level up to which the gain is shown (lower bound
    above 1.0), the first where it is gone (upper bound below 1.0), and the gate there
    (harness.analysis.pays)."""

    arm: str
    task: str
    pays_up_to: int | None
    first_level_not_paying: int | None
    status: str
    label: str
    gate: str | None


class HostRegimeLine(RunRecord):
    arm: str
    memory_bound: bool | None
    compute_bound_at: list[int]
    max_step_ratio: float
    steps_ms: dict[str, float | None]
    line: str


class BreakEvenRow(RunRecord):
    """Per task, k and level: the round's cost over a plain step and the acceptance
    length at which the speedup's interval reaches 1.0 (harness.analysis.surface)."""

    task: str
    k: int
    concurrency: int
    status: Literal["located", "below_measured", "above_measured", "incomplete"]
    break_even_length: float | None
    round_cost_ratio: float | None
    round_cost_ratio_ci_lower: float | None
    round_cost_ratio_ci_upper: float | None
    lengths: str  # the L measured at this k, comma-separated
    label: str


class Placement(RunRecord):
    """A real drafter at one surface level: its tokens per round against the need."""

    arm: str
    task: str
    concurrency: int
    k: int
    reaches: float | None
    needs: float | None
    # every L measured pays here: the need is at most the lowest of them
    needs_below: float | None = None
    status: Literal["pays", "does_not_pay", "unknown", "k_not_on_surface"]
    label: str


class ScheduleRow(RunRecord):
    """The k the surface's drafter would best run at one level, predicted."""

    task: str
    concurrency: int
    k: int | None  # None: its per-position acceptance there is not measured
    predicted_speedup: float | None
    ci_lower: float | None
    ci_upper: float | None
    candidates: dict[str, float]  # k -> predicted speedup ("0": no drafts, 1.0)
    own_k_measured: float | None  # the drafter's measured speedup there, at its own k
    label: str


class VerifiedLevel(RunRecord):
    """The k schedule at one registered level: predicted against measured
    (harness.analysis.k_schedule.schedule_verification)."""

    arm: str
    baseline: str
    task: str
    concurrency: int
    k: int  # the schedule's k at this batch size
    threshold: bool  # k differs from the level below's
    predicted_speedup: float | None  # None: a level off the surface that drafts
    predicted_ci_lower: float | None
    predicted_ci_upper: float | None
    status: str
    reason: str | None
    speedup: float | None
    ci_lower: float | None
    ci_upper: float | None
    tokens_per_round: float | None
    round_cost_ratio: float | None
    collapse: bool
    label: str
    drafter_cell: str
    baseline_cell: str


class SurfaceSummary(RunRecord):
    """The round-cost surface, outside the bars: read by none of them."""

    drafter: str
    break_even: list[BreakEvenRow]
    placements: list[Placement]
    # Per drafter and task: whether its gain fell with load for its acceptance or for
    # the round's cost (harness.analysis.surface.loss_of_gain).
    loss_of_gain: list[str]
    # The k schedule proposed from the surface (harness.analysis.k_schedule.proposed_schedule)
    # and, per task, the drafter engine's own setting for it (or why it has none).
    schedule: list[ScheduleRow]
    schedule_settings: dict[str, str]
    # surface.verify_schedule: the schedule run at every registered level, and the
    # labels of the levels that collapsed.
    verification: list[VerifiedLevel] = Field(default_factory=list, json_schema_extra=since(3))
    collapses: list[str] = Field(default_factory=list, json_schema_extra=since(3))


class Verdict(RunRecord):
    seal: str | None
    run_id: str
    verdict: VerdictWord
    reasons: list[str]
    bars: list[BarRecord]
    reruns: list[RerunOutcome]
    excluded_cells: list[ExcludedCell]
    gpu_throttle_policy: str
    gpu_throttled_cells: list[ThrottledCell]
    skipped_cells: list[SkippedCell]
    speculation_pays: list[PaysRow]
    control_arms: list[ControlArmRecord]  # as the manifest lists them
    host_regime: list[HostRegimeLine]
    surface: SurfaceSummary | None = None  # a study that registers `surface:`
    generated_wall: float
    # INCOMPLETE: each cause with its cells and the command that finishes the run; and
    # the cells `--remeasure-invalid` measured again (harness.analysis.unfinished).
    unfinished: Unfinished | None = Field(None, json_schema_extra=since(4))
    remeasured: list[RemeasuredCell] = Field(default_factory=list, json_schema_extra=since(4))
    # design: group_sequential: the look each bar was decided at, the hours against fixed.
    design: DesignSummary | None = Field(None, json_schema_extra=since(5))

    def bar(self, name: str) -> BarRecord:
        return next(b for b in self.bars if b.name == name)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def verdict_from(data: Any, where: Path, format_version: int = FORMAT_VERSION) -> Verdict:
    """verdict.json's content, checked; `format_version` is its run folder's (format 1
    wrote only the keys it had, so those are read with the rest at their defaults)."""
    try:
        return Verdict.model_validate(data, context={EVERY_KEY: format_version})
    except ValidationError as err:
        raise InputError(f"{where}: {validation_problem(err)}") from None


def read_verdict(path: Path, format_version: int = FORMAT_VERSION) -> Verdict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: no such file (run `specbench analyse` on the run)") from None
    except json.JSONDecodeError as err:
        raise InputError(f"{path}: line {err.lineno}: not valid JSON ({err.msg})") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read it: {err}") from None
    return verdict_from(data, path, format_version)


__all__ = ["VERDICT", "BarRecord", "BarStatus", "Verdict", "read_verdict", "verdict_from"]
