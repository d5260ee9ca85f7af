"""The study's workloads: vendored task data, prompts as data, scorers and intervals.

Public API (the runner and the lead call exactly these):

    TASK_KINDS                      ("chat", "gsm8k", "humaneval", "mmlu", "speed_bench")
    Item                            id, kind, messages (OpenAI chat), reference
    load_items(kind, *, source=None, subset=None, subset_seed=0) -> list[Item]
    data_digests(kind, source=None) -> {path under workloads/ (or dataset@rev/path): sha256}
    score_item(kind, item, response) -> ItemScore
    score_items(kind, items_by_id, responses, *, parallel=None) -> list[ItemScore]
    summarize(kind, scores) -> {"task", "n", "correct", "accuracy", "ci95"}
    wilson_interval(correct, n, level=0.95) -> (lo, hi)
    paired_comparison(a, b) -> PairedComparison

Item ids: ``chat:<question_id>``, ``gsm8k:<0-based line>``,
``humaneval:HumanEval/<n>``, ``mmlu:<subject>/<0-based row in its test csv>``.
``speed_bench:<question_id>`` (SPEED-Bench, read from the hub cache, never vendored).
Chat (MT-Bench, first turn) and SPEED-Bench have no correctness scorer: scoring them
raises NoScorerError. HumanEval programs run in harness.workloads.sandbox. The task
kinds are listed once, in harness.workloads.kinds; each task's extraction steps
are declared in its task.yaml and run by harness.workloads.steps.
"""

from importlib import import_module

# Loaded on first use (PEP 562), so that importing harness.workloads.kinds (the
# study schema does) does not load the data, scoring and sandbox code.
_EXPORTS = {
    "DataIntegrityError": "data",
    "HubSource": "data",
    "Item": "data",
    "data_digests": "data",
    "load_items": "data",
    "provenance": "data",
    "subset_items": "data",
    "ItemScore": "scoring",
    "NoScorerError": "scoring",
    "score_item": "scoring",
    "score_items": "scoring",
    "summarize": "scoring",
    "PairedComparison": "stats",
    "paired_comparison": "stats",
    "wilson_interval": "stats",
    "SCORED_KINDS": "kinds",
    "TASK_KINDS": "kinds",
}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


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
