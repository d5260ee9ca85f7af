"""The study's seal: one sha256 over everything that fixes what a run measures."""

from __future__ import annotations

import hashlib
import json

from harness.prereg.schema import Study


def resolved_study(study: Study) -> dict:
    """The study with every default written out and arm files inlined, plus the
    sha256 of each data file its tasks read: what the seal is taken over."""
    from harness.workloads import data_digests
    from harness.workloads.kinds import CACHED_KINDS

    data: dict[str, dict[str, str]] = {}
    for task in study.tasks:
        if task.kind in CACHED_KINDS:
            # Read from the hub cache (never vendored): the bytes it holds at the revision.
            data[task.name] = data_digests(task.kind, task.source)
        elif task.source is not None:
            # A hub dataset is pinned by its revision; its bytes are not local.
            data[task.name] = {"hub": f"{task.source.dataset}@{task.source.revision}"}
        else:
            data[task.name] = data_digests(task.kind)
    dumped = study.model_dump(mode="json", by_alias=True)
    if study.design.kind == "fixed" and "design" not in study.model_fields_set:
        dumped.pop("design")  # a study that registers none keeps the seal it had before
    return {
        "study": _speed_bench_fields_where_used(dumped),
        "data": data,
    }


def _speed_bench_fields_where_used(study: dict) -> dict:
    """The study without the task fields only speed_bench uses (config, categories,
    revision, source.categories) where they are unset: a study without it keeps the seal
    it had before they existed."""
    from harness.workloads.kinds import CACHED_KINDS

    for task in study.get("tasks", []):
        source = task.get("source") if isinstance(task.get("source"), dict) else {}
        for fields in (task, source):  # added later: left out while unset, on every task
            if fields.get("placeholders", "") is None:
                fields.pop("placeholders")
        if task.get("kind") in CACHED_KINDS:
            continue
        for key in ("config", "categories", "revision"):
            if task.get(key) is None:
                task.pop(key, None)
        if source.get("categories", "") is None:
            source.pop("categories")
    return study


def canonical_json(obj: object) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def seal_of(study: Study) -> str:
    """Same study, same seal, whatever the key order, comments or file split."""
    return hashlib.sha256(canonical_json(resolved_study(study)).encode()).hexdigest()
