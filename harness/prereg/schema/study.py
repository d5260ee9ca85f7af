"""The study: every part of a registration together, and the checks that span them."""

from __future__ import annotations

import datetime
import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from harness.engines import get_engine_kind
from harness.prereg.schema.arms import Arm
from harness.prereg.schema.bars import Bars
from harness.prereg.schema.base import Positive, PositiveInt, Strict
from harness.prereg.schema.design import Design, design_problems
from harness.prereg.schema.loads import Loads
from harness.prereg.schema.recording import Recording
from harness.prereg.schema.surface import (
    SURFACE_PREFIX,
    Surface,
    schedule_arm_name,
    surface_arm_name,
)
from harness.prereg.schema.target import Hardware, ModelSpec
from harness.prereg.schema.tasks import Sampling, TaskSpec


class PlanEstimate(Strict):
    """Assumptions behind `specbench plan`'s GPU-time estimate (never a result)."""

    assumed_acceptance_length: Positive = Field(
        2.5, description="Tokens per round for drafters that state no assumed_acceptance_length."
    )
    mean_output_tokens: Literal["max_tokens"] | PositiveInt = Field(
        "max_tokens",
        description="Output tokens per request assumed; `max_tokens`: each task's max_tokens.",
    )
    engine_start_s: Positive = Field(180.0, description="Seconds assumed per engine start.")


class Study(Strict):
    """A pre-registration: what a study runs, how it measures, and the bars it is judged
    by, fixed and sealed before GPU time is spent."""

    title: str = Field(description="The study's title, shown on its reports.")
    registered: str = Field(description="The registration date, YYYY-MM-DD.")
    hardware: Hardware = Field(description="The hardware it is registered for.")
    model: ModelSpec = Field(description="The target model.")
    arms: list[Arm] = Field(
        description="The arms, at least one; an item may be `file: arms/x.yaml`, an arm in a"
        " file of its own (the seal covers it)."
    )
    loads: Loads = Field(description="The loads the arms are measured under.")
    tasks: list[TaskSpec] = Field(description="The tasks, at least one with the speed use.")
    sampling: Sampling = Field(default_factory=Sampling, description="How every request samples.")
    recording: Recording = Field(
        default_factory=Recording, description="How cells are measured and judged valid."
    )
    bars: Bars = Field(default_factory=Bars, description="The bars the run is judged by.")
    plan_estimate: PlanEstimate = Field(
        default_factory=PlanEstimate,
        description="Assumptions of the plan's GPU-time estimate, never a result.",
    )
    surface: Surface | None = Field(
        None,
        description="The round-cost surface, a stage after the registered ones, never"
        " read by a bar; null: not measured.",
    )
    design: Design = Field(
        default_factory=Design,
        description="When the bars are read: once, after the last"
        " session (fixed), or also at looks between"
        " sessions (group_sequential).",
    )

    @field_validator("registered", mode="before")
    @classmethod
    def _date(cls, v: object) -> object:
        if isinstance(v, datetime.date):  # YAML reads an unquoted date as a date
            return v.isoformat()
        if isinstance(v, str) and not re.match(r"^\d{4}-\d{2}-\d{2}$", v):
            raise ValueError("expected a date as YYYY-MM-DD")
        return v

    @model_validator(mode="after")
    def _cross_references(self) -> Study:
        # Messages carry their own field path so the loader can point at the line.
        problems: list[tuple[tuple, str]] = []
        if not self.arms:
            problems.append((("arms",), "expected at least one arm"))
        if not self.tasks:
            problems.append((("tasks",), "expected at least one task"))
        by_name: dict[str, int] = {}
        for i, arm in enumerate(self.arms):
            if arm.name in by_name:
                problems.append((("arms", i, "name"), f"duplicate arm name {arm.name!r}"))
            by_name.setdefault(arm.name, i)
        for i, arm in enumerate(self.arms):
            if arm.baseline is None:
                continue
            j = by_name.get(arm.baseline)
            if j is None:
                problems.append((("arms", i, "baseline"), f"no arm named {arm.baseline!r}"))
                continue
            base = self.arms[j]
            if base.engine != arm.engine:
                problems.append(
                    (
                        ("arms", i, "baseline"),
                        f"baseline {base.name!r} runs on {base.engine}, this arm on {arm.engine}:"
                        " a speedup is only measured against the same engine",
                    )
                )
            elif base.drafter is not None:
                problems.append((("arms", i, "baseline"), f"baseline {base.name!r} has a drafter"))
        task_names: set[str] = set()
        for i, task in enumerate(self.tasks):
            if task.name in task_names:
                problems.append((("tasks", i, "name"), f"duplicate task name {task.name!r}"))
            task_names.add(task.name)
        levels = set(self.loads.closed_loop.concurrency)
        for key, conc in (
            (("bars", "pass", "speed", "concurrencies"), self.bars.pass_.speed.concurrencies),
            (("bars", "stop", "concurrencies"), self.bars.stop.concurrencies),
        ):
            missing = sorted(set(conc) - levels)
            if missing:
                problems.append((key, f"concurrencies {missing} are not closed-loop levels"))
        if self.bars.pass_.accuracy is not None:
            for k, name in enumerate(self.bars.pass_.accuracy.tasks):
                named = next((t for t in self.tasks if t.name == name), None)
                if named is None:
                    problems.append(
                        (("bars", "pass", "accuracy", "tasks", k), f"no task named {name!r}")
                    )
                elif "accuracy" not in named.uses:
                    problems.append(
                        (
                            ("bars", "pass", "accuracy", "tasks", k),
                            f"task {name!r} lacks the accuracy use",
                        )
                    )
        if self.loads.open_loop is not None and self.loads.open_loop.task not in task_names:
            problems.append(
                (("loads", "open_loop", "task"), f"no task named {self.loads.open_loop.task!r}")
            )
        if not any("speed" in t.uses for t in self.tasks):
            problems.append((("tasks",), "expected at least one task with the speed use"))
        if self.surface is not None:
            problems.extend(self._surface_problems(by_name, levels))
        problems.extend(
            design_problems(
                self.design,
                self.recording.sessions,
                self.bars.intervals.method,
                self.bars.intervals.pooling,
            )
        )
        if problems:
            raise CrossReferenceError(problems)
        return self

    def _surface_problems(
        self, by_name: dict[str, int], levels: set[int]
    ) -> list[tuple[tuple, str]]:
        surface = self.surface
        assert surface is not None
        out: list[tuple[tuple, str]] = []
        j = by_name.get(surface.drafter)
        template = self.arms[j] if j is not None else None
        if template is None:
            out.append((("surface", "drafter"), f"no arm named {surface.drafter!r}"))
        elif template.drafter is None or template.is_control:
            out.append(
                (
                    ("surface", "drafter"),
                    f"arm {surface.drafter!r} is not a drafter arm"
                    " with a real drafter (the surface copies its engine and method)",
                )
            )
        elif template.attach is not None:
            out.append(
                (
                    ("surface", "drafter"),
                    f"arm {surface.drafter!r} is attached: the"
                    " surface sets acceptance on engines specbench starts (launch)",
                )
            )
        else:
            problem = get_engine_kind(template.engine).synthetic_problem(template)
            if problem is not None:
                out.append((("surface", "drafter"), problem))
        for i, k in enumerate(surface.k):
            if not surface.lengths_at(k):
                out.append(
                    (
                        ("surface", "k", i),
                        f"k={k}: every acceptance_length is above k + 1 = {k + 1}",
                    )
                )
        missing = sorted(set(surface.concurrency) - levels)
        if missing:
            out.append(
                (
                    ("surface", "concurrency"),
                    f"concurrencies {missing} are not"
                    " closed-loop levels (each surface cell is paired with its baseline's"
                    " cell at that level)",
                )
            )
        speed_tasks = {t.name for t in self.tasks if "speed" in t.uses}
        for i, name in enumerate(surface.tasks or []):
            if name not in speed_tasks:
                out.append((("surface", "tasks", i), f"no task named {name!r} with the speed use"))
        names = {a.name for a in self.arms}
        if surface.verify_schedule:
            for task in self.surface_tasks():
                if schedule_arm_name(task) in names:
                    out.append(
                        (
                            ("surface",),
                            f"arm name {schedule_arm_name(task)!r} is"
                            " the schedule verification's own; rename the registered arm",
                        )
                    )
                elif len(schedule_arm_name(task)) > 64:
                    out.append(
                        (
                            ("surface", "verify_schedule"),
                            f"task {task!r}: its"
                            f" verification arm's name {schedule_arm_name(task)!r} is over"
                            " 64 characters; shorten the task's name",
                        )
                    )
            if j is not None:
                problem = get_engine_kind(self.arms[j].engine).k_schedule_problem(self.arms[j])
                if problem is not None:
                    out.append((("surface", "verify_schedule"), problem))
        for k in surface.k:
            for length in surface.lengths_at(k):
                if surface_arm_name(k, length) in names:
                    out.append(
                        (
                            ("surface",),
                            f"arm name {surface_arm_name(k, length)!r} is"
                            " the surface's own; rename the registered arm",
                        )
                    )
        if template is not None and not out:  # each control arm as its engine can set it
            from harness.plan_arms import surface_arms

            out += [
                (("surface", "acceptance_length"), f"arm {arm.name!r}: {problem}")
                for arm in surface_arms(self)
                if (problem := get_engine_kind(arm.engine).synthetic_problem(arm))
            ]
        return out

    def surface_tasks(self) -> list[str]:
        if self.surface is None:
            return []
        return self.surface.tasks or [t.name for t in self.tasks if "speed" in t.uses]

    def arm(self, name: str) -> Arm:
        for arm in self.arms:
            if arm.name == name:
                return arm
        if name.startswith(SURFACE_PREFIX):  # an arm the planner derives
            from harness.plan_arms import schedule_arms, surface_arms

            for arm in [*surface_arms(self), *schedule_arms(self)]:
                if arm.name == name:
                    return arm
        raise KeyError(name)

    def control_arms(self) -> list[dict[str, Any]]:
        """The control arms (drafter.synthetic), as the manifest, the verdict, the plan and
        the report name them: measured like any arm, never judged."""
        out = []
        for arm in self.arms:
            if arm.drafter is None or arm.drafter.synthetic is None:
                continue
            k = arm.drafter.num_draft_tokens
            syn = arm.drafter.synthetic
            out.append(
                {
                    "arm": arm.name,
                    "baseline": arm.baseline,
                    "engine": arm.engine,
                    "method": arm.drafter.method,
                    "num_draft_tokens": k,
                    "synthetic": syn.model_dump(mode="json", exclude_none=True),
                    "tokens_per_round": syn.tokens_per_round(k),
                    "line": (
                        f"{arm.name} ({arm.drafter.method}, k={k}, {syn.label(k)}):"
                        " a control arm, its drafts kept by a set chance whatever"
                        " they say; measured for the cost of a round, never judged"
                        " (no identity or accuracy cells, read by no bar)"
                    ),
                }
            )
        return out

    def task(self, name: str) -> TaskSpec:
        for task in self.tasks:
            if task.name == name:
                return task
        raise KeyError(name)


class CrossReferenceError(ValueError):
    """Problems that span fields; each carries the path it is about."""

    def __init__(self, problems: list[tuple[tuple, str]]) -> None:
        super().__init__("; ".join(msg for _, msg in problems))
        self.problems = problems
