"""Speedup, tokens per round and acceptance of each drafter arm by SPEED-Bench category.

A speed_bench task's items keep their category (harness/workloads/speed_bench.py), so a
cell's requests split by category through their item ids: the load driver records
nothing new. Per drafter arm x task x concurrency x category, the pair's requests of that
category go through the speedup's own figures (speedup.pair_figures: the registered
interval rule, the decomposition into tokens per round and round cost, each with its
interval); the acceptance rate is the engine's per-request figures summed over the
category's measured requests (acceptance_requests), with a bootstrap interval over those
requests. `input_length` is the configuration's nominal prompt length (throughput_8k:
8k; qualitative: none), so the throughput configurations, one task each, read as a
breakdown by input length.

Each item's category is recorded in the run folder when the run starts
(`items/<task>.categories.json`), so the table is the same wherever the folder is
analysed; a folder without that record (and without the dataset in the hub cache) gets
one row per task saying so, not a failure.
"""

from __future__ import annotations

import dataclasses
import json
import re
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from harness.analysis.acceptance_requests import request_acceptance
from harness.analysis.frame import framed
from harness.analysis.load import CellData, RunData
from harness.analysis.rows import CategoryRow
from harness.analysis.speedup import pair_figures, pair_key
from harness.errors import InputError, SpecbenchError
from harness.prereg.schema import Intervals, TaskSpec
from harness.records import session_item_id
from harness.workloads.kinds import CACHED_KINDS


def input_length(config: str | None) -> str | None:
    """throughput_8k -> "8k"; qualitative (prompts of every length) -> None."""
    found = re.fullmatch(r"throughput_(\d+k)", config or "")
    return found.group(1) if found else None


ITEMS_DIR = "items"  # the run folder's {item id: category} per task, written at its start


def items_path(run_dir: Path, task: str) -> Path:
    return run_dir / ITEMS_DIR / f"{task}.categories.json"


def loaded_categories(task: TaskSpec) -> dict[str, str]:
    """{item id: category} of the task's items, read from the hub cache."""
    from harness.workloads import load_items

    items = load_items(
        task.kind, source=task.source, subset=task.subset, subset_seed=task.subset_seed
    )
    return {it.id: str(it.reference.get("category")) for it in items}


def item_categories(task: TaskSpec, run_dir: Path | None = None) -> dict[str, str]:
    """{item id: category} as the run sent them: its own record (written when the run
    started, so it is analysed the same anywhere), else the hub cache."""
    if run_dir is not None and items_path(run_dir, task.name).is_file():
        path = items_path(run_dir, task.name)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise InputError(f"{path}: not readable as JSON ({err})") from None
        if not isinstance(data, dict):
            raise InputError(f"{path}: expected an object of item id: category")
        return {str(k): str(v) for k, v in data.items()}
    return loaded_categories(task)


def only_items(cell: CellData, ids: set[str]) -> CellData:
    """The cell with only the requests of those items (warm-up too), every turn of a
    multi-turn item's session included."""
    return dataclasses.replace(
        cell,
        requests=[r for r in cell.requests if session_item_id(r.item_id) in ids],
        warmup=[r for r in cell.warmup if session_item_id(r.item_id) in ids],
    )


def acceptance_interval(cells: list[CellData], intervals: Intervals, key: str) -> dict:
    """The summed per-request acceptance of the cells' measured requests, with a
    percentile bootstrap over those requests (seeded by the study's seed and the key)."""
    records = [
        r
        for c in cells
        for r in c.requests
        if r.ok and r.phase == "measure" and r.speculation is not None
    ]
    summed = request_acceptance(records)
    if summed is None or not summed.draft_tokens:
        return {"spec_requests": len(records)}
    figures = [s for r in records if (s := r.speculation) is not None]
    accepted = np.array([s.accepted for s in figures], dtype=float)
    drafted = np.array([s.draft_tokens for s in figures], dtype=float)
    rng = np.random.default_rng([intervals.seed, zlib.crc32(key.encode())])
    picks = rng.integers(0, len(records), size=(intervals.bootstrap_resamples, len(records)))
    with np.errstate(invalid="ignore", divide="ignore"):
        boots = accepted[picks].sum(axis=1) / drafted[picks].sum(axis=1)
    boots = boots[np.isfinite(boots)]
    tail = (1 - intervals.level) / 2 * 100
    lo, hi = np.percentile(boots, [tail, 100 - tail]) if len(boots) else (np.nan, np.nan)
    return {
        "acceptance_rate": summed.acceptance_rate,
        "acceptance_ci_lower": float(lo),
        "acceptance_ci_upper": float(hi),
        "accept_length": summed.accept_length_per_round,
        "spec_requests": summed.requests,
    }


def _task_rows(run: RunData, task: TaskSpec, categories: dict[str, str]) -> list[dict]:
    study = run.study
    by_category: dict[str, set[str]] = {}
    for item_id, category in categories.items():
        by_category.setdefault(category, set()).add(item_id)
    rows = []
    for arm in study.arms:
        if arm.baseline is None:
            continue
        for c in study.loads.closed_loop.concurrency:
            dc = run.find(arm.name, task.name, "speed", c)
            bc = run.find(arm.baseline, task.name, "speed", c)
            d_sessions, b_sessions = run.sessions_of(dc), run.sessions_of(bc)
            for category, ids in by_category.items():
                key = f"{pair_key(dc, bc)}|{category}"
                d = [only_items(x, ids) for x in d_sessions]
                b = [only_items(x, ids) for x in b_sessions]
                row: dict = {
                    "arm": arm.name,
                    "baseline": arm.baseline,
                    "task": task.name,
                    "config": task.config,
                    "input_length": input_length(task.config),
                    "category": category,
                    "concurrency": c,
                    "drafter_cell": dc.id,
                    "baseline_cell": bc.id,
                    "n_items": len(ids),
                    "sessions": len(d_sessions),
                }
                row.update(pair_figures(study, d, b, key))
                if all(x.usable for x in d):
                    row.update(acceptance_interval(d, study.bars.intervals, key))
                rows.append(row)
    return rows


def category_table(run: RunData) -> pd.DataFrame:
    """One row per drafter arm x speed_bench speed task x concurrency x category (empty
    when the study has no speed_bench task)."""
    rows: list[dict] = []
    for task in run.study.tasks:
        if task.kind not in CACHED_KINDS or "speed" not in task.uses:
            continue
        try:
            categories = item_categories(task, run.run_dir)
        except SpecbenchError as err:
            rows.append(
                {
                    "task": task.name,
                    "config": task.config,
                    "input_length": input_length(task.config),
                    "status": "unavailable",
                    "reason": f"its items cannot be read here: {err.lines[0]}",
                }
            )
            continue
        rows += _task_rows(run, task, categories)
    return framed(rows, CategoryRow)
