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

    drafter: Name = Field(
        description="The drafter arm copied (its engine, launch, method"
        " and baseline): a launched arm with a real drafter."
    )
    k: Annotated[list[PositiveInt], Field(min_length=1)] = Field(
        description="The draft tokens per round measured, distinct (sorted)."
    )
    acceptance_length: Annotated[list[Annotated[float, Field(ge=1)]], Field(min_length=2)] = Field(
        description="The acceptance lengths (tokens a round) set, at least two,"
        " distinct (sorted); one above k + 1 is left out at that k."
    )
    concurrency: Annotated[list[PositiveInt], Field(min_length=1)] = Field(
        description="The levels measured, distinct (sorted), each a registered closed-loop level."
    )
    tasks: list[Name] | None = Field(
        None,
        description="The tasks measured, each with the speed use; null: every task"
        " with the speed use.",
    )
    # vllm#49548: a schedule's throughput falling apart at its batch-size threshold.
    verify_schedule: bool = Field(
        False,
        description="Stage 5: run the k schedule proposed from the surface by the"
        " drafter's engine (`surface-schedule-<task>`, its drafter with"
        " drafter.k_schedule set once stage 4 is measured) at every"
        " registered closed-loop level, its measured speedup beside the"
        " predicted one.",
    )
    collapse_below: Annotated[float, Field(gt=0, le=1)] = Field(
        0.8,
        description="A verified level whose measured speedup (its interval's upper"
        " bound) is below this many times the predicted one is flagged a"
        " collapse.",
    )

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
