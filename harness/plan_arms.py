"""The arms the planner derives from the registration's surface drafter: stage 4's control
arms and stage 5's k schedule arms. Made on each call, never stored in the study's `arms`
(a study read back from study.json gains none); `Study.arm` finds them by name."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.prereg.schema.arms import Arm, KRange, SyntheticAcceptance
from harness.prereg.schema.surface import schedule_arm_name, surface_arm_name

if TYPE_CHECKING:
    from harness.prereg.schema.study import Study


def surface_arms(study: Study) -> list[Arm]:
    """The surface's control arms: its drafter arm at each k, acceptance set to each L."""
    if study.surface is None:
        return []
    template = study.arm(study.surface.drafter)
    assert template.drafter is not None
    out = []
    for k in study.surface.k:
        for length in study.surface.lengths_at(k):
            drafter = template.drafter.model_copy(
                update={
                    "num_draft_tokens": k,
                    "expect": None,
                    "assumed_acceptance_length": length,
                    "synthetic": SyntheticAcceptance(acceptance_length=length),
                }
            )
            out.append(
                template.model_copy(
                    update={
                        "name": surface_arm_name(k, length),
                        "drafter": drafter,
                        "description": f"round-cost surface: {template.name} at k={k},"
                        f" acceptance set to {length:g}",
                    }
                )
            )
    return out


def schedule_arms(study: Study, k_schedules: dict[str, list[KRange]] | None = None) -> list[Arm]:
    """The schedule verification's arms (`surface.verify_schedule`), one per surface task:
    the drafter arm running, per batch size, the k the surface proposed for the task. That
    is known once stage 4 is measured (the manifest's `k_schedules`, by arm); without it,
    the drafter at its own k: what every reader but the engine start needs."""
    if study.surface is None or not study.surface.verify_schedule:
        return []
    template = study.arm(study.surface.drafter)
    assert template.drafter is not None
    out = []
    for task in study.surface_tasks():
        name = schedule_arm_name(task)
        drafter = template.drafter.model_copy(
            update={"expect": None, "k_schedule": (k_schedules or {}).get(name)}
        )
        out.append(
            template.model_copy(
                update={
                    "name": name,
                    "drafter": drafter,
                    "description": f"the k schedule proposed from the round-cost surface for"
                    f" task {task}, run by {template.name}'s engine",
                }
            )
        )
    return out
