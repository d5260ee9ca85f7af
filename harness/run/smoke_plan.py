"""What the smoke runs: its prompts, each arm's key and order, and the checks passed before."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from harness.measure.requests import RequestSpec
from harness.prereg.schema import Study, TaskSpec
from harness.records import SmokeArmCheck, SmokeIdentityCheck, read_smoke_records
from harness.run.cell_requests import task_items
from harness.rundir import SMOKE_RECORDS

SMOKE_PROMPTS = 2


def smoke_task(study: Study) -> TaskSpec:
    """The identity task (the prompts the identity bar compares), else the first speed task."""
    for task in study.tasks:
        if "identity" in task.uses:
            return task
    return next(t for t in study.tasks if "speed" in t.uses)


def smoke_requests(study: Study) -> list[RequestSpec]:
    task = smoke_task(study)
    return [
        RequestSpec(item_id=item.id, messages=item.messages, max_tokens=task.max_tokens)
        for item in task_items(task)[:SMOKE_PROMPTS]
    ]


def smoke_key(study: Study, arm_name: str, requests: list[RequestSpec]) -> str:
    arm = study.arm(arm_name)
    baseline = study.arm(arm.baseline) if arm.baseline else None
    data = {
        "arm": arm.model_dump(mode="json"),
        "baseline": baseline.model_dump(mode="json") if baseline else None,
        "model": study.model.model_dump(mode="json"),
        "sampling": study.sampling.model_dump(mode="json"),
        "requests": [asdict(r) for r in requests],
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def smoke_order(study: Study, arms: list[str], last: str | None) -> list[str]:
    """Baselines first (a drafter is compared as soon as it answers), then drafters, and
    `last` (the first registered cell's arm) at the end, so its engine stays up."""
    baselines = [a.name for a in study.arms if a.name in arms and a.is_baseline]
    drafters = [a.name for a in study.arms if a.name in arms and not a.is_baseline]
    order = [n for n in baselines + drafters if n != last]
    return order + [last] if last in arms else order


def smoke_records(root: Path) -> list[SmokeArmCheck | SmokeIdentityCheck]:
    """smoke/arms.jsonl as written (empty when the run has no smoke yet)."""
    return read_smoke_records(root / SMOKE_RECORDS)


def passed_checks(records: list, keys: dict[str, str]) -> tuple[dict[str, SmokeArmCheck], set[str]]:
    """The latest passed own check of each arm under its current key, and the drafters
    whose latest comparison under their current key passed."""
    own: dict[str, SmokeArmCheck] = {}
    identity: dict[str, bool] = {}
    for rec in records:
        if keys.get(rec.arm) != rec.key:
            continue
        if isinstance(rec, SmokeArmCheck):
            if rec.status == "passed":
                own[rec.arm] = rec
            else:
                own.pop(rec.arm, None)
        else:
            identity[rec.arm] = rec.status == "passed"
    return own, {arm for arm, ok in identity.items() if ok}
