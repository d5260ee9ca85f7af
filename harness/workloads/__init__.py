"""The study's workloads: vendored task data, prompts as data, scorers and intervals.

Public API (the runner and the lead call exactly these):

    TASK_KINDS                      ("chat", "gsm8k", "humaneval", "mmlu")
    Item                            id, kind, messages (OpenAI chat), reference
    load_items(kind, *, source=None, subset=None, subset_seed=0) -> list[Item]
    data_digests(kind) -> {path under workloads/: sha256}
    score_item(kind, item, response) -> ItemScore
    score_items(kind, items_by_id, responses, *, parallel=None) -> list[ItemScore]
    summarize(kind, scores) -> {"task", "n", "correct", "accuracy", "ci95"}
    wilson_interval(correct, n, level=0.95) -> (lo, hi)
    paired_comparison(a, b) -> PairedComparison

Item ids: ``chat:<question_id>``, ``gsm8k:<0-based line>``,
``humaneval:HumanEval/<n>``, ``mmlu:<subject>/<0-based row in its test csv>``.
Chat (MT-Bench, first turn) has no correctness scorer: scoring it raises
NoScorerError. HumanEval programs run in harness.workloads.sandbox.
"""

from harness.workloads.data import (
    DataIntegrityError,
    HubSource,
    Item,
    data_digests,
    load_items,
    provenance,
    subset_items,
)
from harness.workloads.scoring import (
    SCORED_KINDS,
    ItemScore,
    NoScorerError,
    score_item,
    score_items,
    summarize,
)
from harness.workloads.stats import PairedComparison, paired_comparison, wilson_interval
from harness.workloads.templates import TASK_KINDS

__all__ = [
    "SCORED_KINDS",
    "TASK_KINDS",
    "DataIntegrityError",
    "HubSource",
    "Item",
    "ItemScore",
    "NoScorerError",
    "PairedComparison",
    "data_digests",
    "load_items",
    "paired_comparison",
    "provenance",
    "score_item",
    "score_items",
    "subset_items",
    "summarize",
    "wilson_interval",
]
