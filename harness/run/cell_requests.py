"""What a cell sends: the task's items as requests, in the registered order."""

from __future__ import annotations

from harness.measure.requests import RequestSpec
from harness.prereg.schema import Study, TaskSpec
from harness.rundir.cell import Cell
from harness.workloads import Item, load_items

# Loaded once per process: every cell of a task sends the same items.
_LOADED: dict[tuple, tuple[Item, ...]] = {}


def task_items(task: TaskSpec) -> list[Item]:
    """The task's items in registered order (its seeded subset when it names one)."""
    source = task.source.model_dump_json() if task.source else None
    key = (task.kind, source, task.subset, task.subset_seed)
    if key not in _LOADED:
        _LOADED[key] = tuple(
            load_items(
                task.kind, source=task.source, subset=task.subset, subset_seed=task.subset_seed
            )
        )
    return list(_LOADED[key])


def cell_items(study: Study, cell: Cell) -> list[Item]:
    """Speed and open-loop cells cycle through every item; identity cells use the
    first `identity_items`; accuracy cells use each item once."""
    items = task_items(study.task(cell.task))
    if cell.kind == "identity":
        return items[: cell.requests]
    return items


def cell_request_specs(study: Study, cell: Cell) -> list[RequestSpec]:
    """Each item as a request; with `turns: all`, a multi-turn item as a session of its
    turns (its later turns sent by the same user, each after the answer before it)."""
    task = study.task(cell.task)
    every_turn = task.turns == "all"
    return [
        RequestSpec(
            item_id=item.id,
            messages=item.messages,
            max_tokens=task.max_tokens,
            later_turns=item.later_turns if every_turn else (),
        )
        for item in cell_items(study, cell)
    ]
