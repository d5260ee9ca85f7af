"""SPEED-Bench (nvidia/SPEED-Bench) as a task: its rows, read from the hub cache.

Nothing of it is vendored (its license, workloads/README.md): `specbench fetch` puts the
registered commit in the hub cache (harness.weights.datasets), and this reads the
configuration's parquet files from there, offline, with pyarrow. The columns are the
dataset card's `dataset_info`: question_id, category, sub_category, turns (a list of
strings), source, src_id, difficulty, multiturn. The item builder (data.py) keeps each
row's category, sub-category and difficulty in its item's reference: the analysis breaks
the figures down by category through the item ids (harness/analysis/categories.py).
A row that is not what the card says raises ValueError (data.py: DataIntegrityError);
this module imports nothing of data.py, which imports it.
"""

from __future__ import annotations

from typing import Any

from harness.weights.datasets import DatasetSource, dataset_files, file_digests

COLUMNS = (
    "question_id",
    "category",
    "sub_category",
    "turns",
    "source",
    "src_id",
    "difficulty",
    "multiturn",
)
# What each item's reference keeps of its row (turns: how many the row has).
REFERENCE_FIELDS = ("question_id", "category", "sub_category", "difficulty", "source", "multiturn")


def dataset_source(source: Any) -> DatasetSource:
    """The dataset a task's `source` (schema.HubSource) names."""
    if not source or not getattr(source, "config", None):
        raise ValueError(
            "a speed_bench task reads its data through its source"
            " (filled from its config, categories and revision)"
        )
    return DatasetSource(source.dataset, source.revision, source.config)


def read_rows(source: Any) -> list[dict]:
    """Every row of the configuration's parquet files, in file order, from the cache."""
    import pyarrow.parquet as pq

    rows: list[dict] = []
    for path in dataset_files(dataset_source(source)):
        table = pq.read_table(path)
        missing = [c for c in COLUMNS if c not in table.column_names]
        if missing:
            raise ValueError(f"{path}: lacks column(s) {missing} of the dataset card")
        rows.extend(table.select(list(COLUMNS)).to_pylist())
    return rows


def keep_categories(rows: list[dict], categories: list[str] | None, where: str) -> list[dict]:
    """The rows of the registered categories (all when None); a category no row has is
    refused, naming the ones there are."""
    if categories is None:
        return rows
    present = list(dict.fromkeys(str(r["category"]) for r in rows))
    unknown = [c for c in categories if c not in present]
    if unknown:
        raise ValueError(
            f"{where}: no row of category {unknown}; the categories there are {present}"
        )
    return [r for r in rows if r["category"] in categories]


# The sentence a row's first turn starts with when the hub publishes only a pointer to
# its text: NVIDIA-NeMo/Skills nemo_skills/dataset/speed-bench/prepare.py TURNS_PLACEHOLDER,
# sometimes followed by a template with {article}/{question} holes. Its text must be
# rebuilt from one of twelve external datasets (specdec_bench); specbench does not.
PLACEHOLDER = "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH"


def is_placeholder(row: dict) -> bool:
    turns = row.get("turns")
    if not turns:
        return False
    return isinstance(turns[0], str) and turns[0].startswith(PLACEHOLDER)


def placeholder_counts(rows: list[dict]) -> dict[str, tuple[int, int]]:
    """{category: (placeholder rows, rows)}, in the dataset's order."""
    out: dict[str, tuple[int, int]] = {}
    for row in rows:
        held, total = out.get(str(row.get("category")), (0, 0))
        out[str(row.get("category"))] = (held + is_placeholder(row), total + 1)
    return out


def counts_text(counts: dict[str, tuple[int, int]]) -> str:
    return ", ".join(f"{c} {held} of {total}" for c, (held, total) in counts.items())


def without_placeholders(rows: list[dict], policy: str | None, where: str) -> list[dict]:
    """The rows to send: a placeholder row never is. `refuse` (the default) refuses a
    task that has any; `drop` leaves them out, and refuses a task left with none."""
    counts = placeholder_counts(rows)
    if not any(held for held, _ in counts.values()):
        return rows
    kept = [r for r in rows if not is_placeholder(r)]
    if policy != "drop" or not kept:
        raise ValueError(
            f"{where}: rows whose text is the placeholder {PLACEHOLDER[:40]!r}... (its text"
            f" lives in another dataset), by category: {counts_text(counts)}; never sent:"
            + (
                " no row is left"
                if kept == [] and policy == "drop"
                else " register `placeholders: drop` on the task to measure the rest"
            )
        )
    return kept


def task_placeholders(source: Any) -> dict[str, tuple[int, int]]:
    """{category: (placeholder rows, rows)} of the registered categories, from the cache."""
    where = f"{source.dataset}@{source.revision} {source.config}"
    return placeholder_counts(keep_categories(read_rows(source), source.categories, where))


def speed_bench_digests(source: Any) -> dict[str, str]:
    """{dataset@revision/file: sha256} of the parquet files the task reads (the seal's)."""
    return file_digests(dataset_source(source))
