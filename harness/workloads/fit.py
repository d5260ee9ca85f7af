"""What `validate` checks of a study's prompts before any GPU time: SPEED-Bench rows
published as a placeholder (never sent), and every prompt plus its max_tokens against
the model's context (an engine refuses a request that does not fit, mid-study).

Counts are exact where the model's tokenizer is at hand (a local model folder, or its
snapshot in the hub cache once `specbench fetch` has run): the messages' text through
`tokenizer.json`, plus an allowance for the chat template's markers (ChatML spends 5
tokens a message). Otherwise they are an estimate, 4 characters a token, and say so.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from harness.prereg.schema import Study, TaskSpec
from harness.weights.cache import find_checkpoint
from harness.workloads.kinds import CACHED_KINDS
from harness.workloads.speed_bench import counts_text, task_placeholders

CHARS_PER_TOKEN = 4  # the estimate without a tokenizer
TEMPLATE_PER_MESSAGE = 8  # allowance for a message's template markers (ChatML: 5)
TEMPLATE_EXTRA = 16  # the generation prompt and an empty thinking block
NAMED = 20  # items named in a refusal, the rest counted


Problem = tuple[tuple, str]  # the field path it is about, and what is wrong


def placeholder_report(study: Study) -> tuple[list[str], list[Problem]]:
    """(lines, problems): each SPEED-Bench task's placeholder rows by category, and a
    problem for a task that refuses them (placeholders unset or `refuse`)."""
    lines: list[str] = []
    problems: list[Problem] = []
    for i, task in enumerate(study.tasks):
        if task.kind not in CACHED_KINDS or task.source is None:
            continue
        counts = task_placeholders(task.source)
        held = sum(h for h, _ in counts.values())
        empty = [c for c, (h, n) in counts.items() if h == n]
        what = (
            "none"
            if not held
            else "dropped (placeholders: drop)"
            if task.placeholders == "drop"
            else "refused"
        )
        lines.append(
            f"task {task.name}: SPEED-Bench placeholder rows (never sent), by"
            f" category: {counts_text(counts)}: {what}"
            + (
                f"; categories left empty: {', '.join(empty)}"
                if held and empty and task.placeholders == "drop"
                else ""
            )
        )
        if held and task.placeholders != "drop":
            problems.append(
                (
                    ("tasks", i, "placeholders"),
                    f"task {task.name}: {held} rows are"
                    f" SPEED-Bench placeholders ({counts_text(counts)}), whose text"
                    " lives in other datasets: register `placeholders: drop` to"
                    " measure the rest (specbench does not resolve them)",
                )
            )
        elif held and held == sum(n for _, n in counts.values()):
            problems.append((("tasks", i), f"task {task.name}: every row is a placeholder"))
    return lines, problems


def model_folder(study: Study) -> Path | None:
    """The target's files on this machine: a local folder, or its hub-cache snapshot."""
    model = study.model.id
    if "${" in model:  # a folder named by a variable, expanded when the run starts
        return None
    local = Path(os.path.expanduser(model))
    if local.is_dir():
        return local
    found = find_checkpoint(model, study.model.revision) if model.count("/") == 1 else None
    return found.snapshot if found is not None else None


def context_of(study: Study, folder: Path | None) -> tuple[int | None, str]:
    if study.model.max_model_len is not None:
        return study.model.max_model_len, "model.max_model_len"
    try:
        config = json.loads((folder / "config.json").read_text()) if folder else {}
    except (OSError, ValueError):
        config = {}
    length = config.get("max_position_embeddings")
    return (
        (int(length), "the model's config.json max_position_embeddings") if length else (None, "")
    )


def token_counter(folder: Path | None) -> tuple[Callable[[str], int], str]:
    """(count, how): the tokenizer's where it is at hand, else the estimate."""
    path = folder / "tokenizer.json" if folder is not None else None
    if path is not None and path.is_file():
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(path))
        return (
            lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids),
            f"counted with {path.name}, plus at most {TEMPLATE_PER_MESSAGE} template"
            f" tokens a message and {TEMPLATE_EXTRA}",
        )
    return (
        lambda text: -(-len(text) // CHARS_PER_TOKEN),
        f"ESTIMATED at {CHARS_PER_TOKEN} characters a token: the model's tokenizer is not"
        " in the hub cache (`specbench fetch` makes it exact)",
    )


def needed_tokens(
    task: TaskSpec, messages: list[dict], later: tuple[str, ...], count: Callable[[str], int]
) -> int:
    """The context a request of this item can need: its messages, the template, and its
    answer; with `turns: all`, the last turn's, every earlier answer at max_tokens."""
    texts = [str(m.get("content", "")) for m in messages]
    if task.turns == "all":
        texts += list(later)
    answers = 1 + (len(later) if task.turns == "all" else 0)
    return (
        sum(count(t) for t in texts)
        + TEMPLATE_PER_MESSAGE * (len(texts) + answers - 1)
        + TEMPLATE_EXTRA
        + answers * task.max_tokens
    )


def context_report(study: Study, skip: set[str]) -> tuple[list[str], list[Problem]]:
    """(lines, problems): per task, whether every prompt plus max_tokens fits the model's
    context; a problem names the items that do not (tasks in `skip` are not read)."""
    from harness.workloads import load_items

    folder = model_folder(study)
    context, where = context_of(study, folder)
    if context is None:
        return [
            "prompt lengths: not checked (no model.max_model_len, and no config.json"
            " of the model here)"
        ], []
    count, how = token_counter(folder)
    lines, problems = (
        [f"prompt + max_tokens against the context, {context} tokens ({where}); {how}:"],
        [],
    )
    for i, task in enumerate(study.tasks):
        if task.name in skip or (task.source is not None and task.kind not in CACHED_KINDS):
            lines += (
                []
                if task.name in skip
                else [f"  task {task.name}: not checked (read from the hub when the run starts)"]
            )
            continue
        items = load_items(
            task.kind, source=task.source, subset=task.subset, subset_seed=task.subset_seed
        )
        need = {it.id: needed_tokens(task, it.messages, it.later_turns, count) for it in items}
        over = {k: v for k, v in need.items() if v > context}
        lines.append(
            f"  task {task.name}: at most {max(need.values())};"
            f" {len(over)} of {len(need)} items over"
        )
        if over:
            named = ", ".join(f"{k} ({v})" for k, v in list(over.items())[:NAMED])
            more = f" and {len(over) - NAMED} more" if len(over) > NAMED else ""
            problems.append(
                (
                    ("tasks", i, "max_tokens"),
                    f"task {task.name}: {len(over)} of"
                    f" {len(need)} items need more than the context, {context} tokens"
                    f" ({where}), with max_tokens {task.max_tokens} ({how}):"
                    f" {named}{more}",
                )
            )
    return lines, problems
