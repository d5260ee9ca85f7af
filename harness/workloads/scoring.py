"""Per-item scorers and the accuracy summary (the runner and `specbench score` share these).

The answer (or code) is read from each reply by the extraction steps the task's
task.yaml declares (harness/workloads/steps.py); the comparison with the gold
answer is the code below.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from harness.workloads.data import Item
from harness.workloads.extract import gsm8k_equal, humaneval_program
from harness.workloads.kinds import SCORED_KINDS, TASK_KINDS
from harness.workloads.sandbox import SandboxLimits, default_parallel, run_programs
from harness.workloads.stats import wilson_interval
from harness.workloads.templates import TaskTemplate, load_task


class NoScorerError(ValueError):
    """The task has no correctness scorer (chat)."""


@dataclass(frozen=True)
class ItemScore:
    id: str
    extracted: str | None  # the answer / code read from the response (None: nothing found)
    correct: bool
    detail: str  # how it was read and why it is (in)correct, one line

    def to_dict(self) -> dict:
        return asdict(self)


def _check_scored(kind: str) -> None:
    if kind not in TASK_KINDS:
        raise ValueError(f"unknown task kind {kind!r}; known: {', '.join(TASK_KINDS)}")
    if kind not in SCORED_KINDS:
        raise NoScorerError(
            f"task {kind!r} has no correctness scorer (MT-Bench chat is a speed/identity "
            f"task); scored tasks: {', '.join(SCORED_KINDS)}"
        )


def _check_item(kind: str, item: Item, response) -> None:
    if item.kind != kind:
        raise ValueError(f"item {item.id} is a {item.kind} item, not {kind}")
    if not isinstance(response, str):
        raise TypeError(f"response for {item.id} must be a string, not {type(response).__name__}")


def humaneval_program_for(
    item: Item, response: str, spec: TaskTemplate | None = None
) -> tuple[str, str]:
    """(extracted code, full program to run) for a HumanEval response; `spec` is the
    loaded humaneval task (loaded here when not given)."""
    ref = item.reference
    code = (spec or load_task("humaneval")).extract_answer(response).value
    code = "" if code is None else code
    return code, humaneval_program(ref["prompt"], code, ref["test"], ref["entry_point"])


def _score_text(kind: str, spec: TaskTemplate, item: Item, response: str) -> ItemScore:
    if kind == "gsm8k":
        gold = item.reference["answer"]
        found = spec.extract_answer(response)
        extracted = found.value
        ok = gsm8k_equal(extracted, gold)
        how = "no number found" if extracted is None else f"read by {found.rule}"
        return ItemScore(item.id, extracted, ok, f"{how}; gold {gold}")
    if kind == "mmlu":
        gold = item.reference["answer"]
        letter = spec.extract_answer(response).value
        how = "no 'Answer: X' line" if letter is None else "read 'Answer: X'"
        return ItemScore(item.id, letter, letter == gold, f"{how}; gold {gold}")
    raise AssertionError(kind)


def score_item(
    kind: str, item: Item, response: str, *, limits: SandboxLimits | None = None
) -> ItemScore:
    """Score one response. HumanEval runs the program in the sandbox."""
    return score_items(kind, {item.id: item}, {item.id: response}, parallel=1, limits=limits)[0]


def score_items(
    kind: str,
    items_by_id: dict[str, Item],
    responses: dict[str, str],
    *,
    parallel: int | None = None,
    limits: SandboxLimits | None = None,
) -> list[ItemScore]:
    """Score responses (id -> text) against their items; results in `responses` order.

    Raises ValueError for ids not among the items. HumanEval programs run in
    the sandbox, at most `parallel` at a time (None: min(2, cpu count)).
    """
    _check_scored(kind)
    unknown = [rid for rid in responses if rid not in items_by_id]
    if unknown:
        raise ValueError(
            f"{len(unknown)} response id(s) are not {kind} items: {', '.join(unknown[:5])}"
        )
    for rid, text in responses.items():
        _check_item(kind, items_by_id[rid], text)
    spec = load_task(kind)
    if kind != "humaneval":
        return [_score_text(kind, spec, items_by_id[rid], text) for rid, text in responses.items()]

    ids = list(responses)
    codes, programs = [], []
    for rid in ids:
        code, program = humaneval_program_for(items_by_id[rid], responses[rid], spec)
        codes.append(code)
        programs.append(program)
    results = run_programs(
        programs, limits, parallel=default_parallel() if parallel is None else parallel
    )
    return [
        ItemScore(rid, code, r.passed, f"{r.detail} [sandbox: {r.isolation}]")
        for rid, code, r in zip(ids, codes, results, strict=True)
    ]


def summarize(kind: str, scores: list[ItemScore]) -> dict:
    """{"task", "n", "correct", "accuracy", "ci95": [lo, hi]} (Wilson 95%)."""
    if kind not in TASK_KINDS:
        raise ValueError(f"unknown task kind {kind!r}")
    n = len(scores)
    correct = sum(1 for s in scores if s.correct)
    lo, hi = wilson_interval(correct, n)
    return {
        "task": kind,
        "n": n,
        "correct": correct,
        "accuracy": correct / n if n else None,
        "ci95": [lo, hi],
    }
