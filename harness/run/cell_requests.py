"""What a cell sends: the task's items as requests, in the registered order."""

from __future__ import annotations

from functools import cache

from harness.measure.requests import RequestSpec
from harness.plan import Cell
from harness.prereg.schema import Study, TaskSpec
from harness.workloads import Item, load_items


@cache
def _items(kind: str, source_key: str | None, subset: int | None, subset_seed: int,
           task: TaskSpec) -> tuple[Item, ...]:
    return tuple(load_items(kind, source=task.source, subset=subset, subset_seed=subset_seed))


def task_items(task: TaskSpec) -> list[Item]:
    """The task's items in registered order (its seeded subset when it names one)."""
    key = f"{task.source.dataset}@{task.source.revision}" if task.source else None
    return list(_items(task.kind, key, task.subset, task.subset_seed, task))


def cell_items(study: Study, cell: Cell) -> list[Item]:
    """Speed and open-loop cells cycle through every item; identity cells use the
    first `identity_items`; accuracy cells use each item once."""
    items = task_items(study.task(cell.task))
    if cell.kind == "identity":
        return items[: cell.requests]
    return items


def cell_request_specs(study: Study, cell: Cell) -> list[RequestSpec]:
    max_tokens = study.task(cell.task).max_tokens
    return [
        RequestSpec(item_id=item.id, messages=item.messages, max_tokens=max_tokens)
        for item in cell_items(study, cell)
    ]
