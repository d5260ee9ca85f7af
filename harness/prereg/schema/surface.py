"""The round-cost surface and its schedule verification, and the arm names they use."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from harness.prereg.schema.base import Name, PositiveInt, Strict


class Surface(Strict):
    """The round-cost surface (issue 32), a stage after the registered ones: the arm
    `drafter` names, copied at each k with its acceptance set to each L (control arms,
    `surface-k<k>-L<L>`, drafts kept by that chance whatever they say), measured at each
    level on each task against that arm's baseline. It says what a round costs at each k
    and load apart from any drafter's quality, and the acceptance a drafter needs there
    to pay (harness/analysis/surface.py). Never read by a bar. An L above k + 1 cannot be
    set at that k and is left out there."""

    drafter: Name  # the drafter arm copied: engine, launch, method, baseline
    k: Annotated[list[PositiveInt], Field(min_length=1)]
    acceptance_length: Annotated[list[Annotated[float, Field(ge=1)]], Field(min_length=2)]
    concurrency: Annotated[list[PositiveInt], Field(min_length=1)]
    tasks: list[Name] | None = None  # None: every task with the speed use
    # Stage 5: the k schedule proposed from the surface, run by the drafter's engine
    # (`surface-schedule-<task>`, its drafter with drafter.k_schedule set once stage 4
    # is measured) at every registered closed-loop level, its measured speedup beside
    # the predicted one. A level whose measured speedup (its interval's upper bound) is
    # below collapse_below x the predicted one is flagged a collapse (vllm#49548: a
    # schedule's throughput falling apart at its batch-size threshold).
    verify_schedule: bool = False
    collapse_below: Annotated[float, Field(gt=0, le=1)] = 0.8

    @field_validator("k", "acceptance_length", "concurrency")
    @classmethod
    def _distinct_ascending(cls, values: list) -> list:
        if len(set(values)) != len(values):
            raise ValueError(f"values repeat: {values}")
        return sorted(values)

    def lengths_at(self, k: int) -> list[float]:
        return [length for length in self.acceptance_length if length <= k + 1]


SURFACE_PREFIX = "surface-"


def surface_arm_name(k: int, length: float) -> str:
    return f"{SURFACE_PREFIX}k{k}-L{length:g}"


SCHEDULE_PREFIX = f"{SURFACE_PREFIX}schedule-"


def schedule_arm_name(task: str) -> str:
    return f"{SCHEDULE_PREFIX}{task}"
