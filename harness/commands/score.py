"""`specbench score TASK RESPONSES.jsonl [--per-item OUT.jsonl]`: score saved responses.

Input: one JSON object per line, ``{"id": ..., "response": ...}`` (other keys
are ignored; blank lines are skipped). Output: the summary
``{"task", "n", "correct", "accuracy", "ci95": [lo, hi]}`` on stdout, and with
--per-item one ``{"id", "extracted", "correct", "detail"}`` line per response,
in input order. Bad JSON, a missing or non-string field, an id that is not an
item of the task, or a repeated id: exit 2 naming the line. The runner calls
the same scorers (harness.workloads.score_items).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.atomic import write_jsonl
from harness.errors import InputError


def register(subparsers) -> None:
    from harness.workloads import TASK_KINDS

    p = subparsers.add_parser(
        "score",
        help="score a task's saved responses (accuracy with a Wilson 95%% interval)",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("task", choices=TASK_KINDS, metavar="TASK", help="gsm8k, humaneval or mmlu")
    p.add_argument("responses", type=Path, metavar="RESPONSES.jsonl")
    p.add_argument("--per-item", type=Path, metavar="OUT.jsonl", help="write per-item results")
    p.add_argument(
        "--parallel",
        type=int,
        default=None,
        help="HumanEval programs run at once (default min(2, CPUs))",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=3.0,
        help="HumanEval wall-clock limit per problem in seconds (default 3)",
    )
    p.set_defaults(func=run)


def read_responses(path: Path, known_ids: set[str], task: str) -> dict[str, str]:
    """id -> response, in file order; InputError naming the line on any problem."""
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise InputError(f"cannot read {path}: {err.strerror or err}") from err
    out: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for lineno, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        where = f"{path} line {lineno}"
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as err:
            raise InputError(f"{where}: not UTF-8 ({err.reason} at byte {err.start})") from err
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as err:
            raise InputError(f"{where}: bad JSON: {err.msg} (column {err.colno})") from err
        if not isinstance(obj, dict):
            raise InputError(f"{where}: expected a JSON object with 'id' and 'response'")
        for field in ("id", "response"):
            if field not in obj:
                raise InputError(f"{where}: missing field {field!r}")
            if not isinstance(obj[field], str):
                kind = type(obj[field]).__name__ if obj[field] is not None else "null"
                raise InputError(f"{where}: field {field!r} must be a string, not {kind}")
        item_id = obj["id"]
        if item_id not in known_ids:
            raise InputError(f"{where}: unknown id {item_id!r} for task {task}")
        if item_id in out:
            raise InputError(f"{where}: id {item_id!r} repeats line {first_line[item_id]}")
        out[item_id] = obj["response"]
        first_line[item_id] = lineno
    if not out:
        raise InputError(f"{path}: no responses to score")
    return out


def run(args: argparse.Namespace) -> int:
    from harness.workloads import SCORED_KINDS, load_items, score_items, summarize
    from harness.workloads.sandbox import MAX_SLOTS, SandboxLimits

    if args.task not in SCORED_KINDS:
        raise InputError(
            f"task {args.task!r} has no correctness scorer (MT-Bench chat is a speed/identity "
            f"task); scored tasks: {', '.join(SCORED_KINDS)}"
        )
    if args.parallel is not None and not 1 <= args.parallel <= MAX_SLOTS:
        raise InputError(f"--parallel must be between 1 and {MAX_SLOTS}")
    if not args.timeout > 0:
        raise InputError("--timeout must be positive")
    items = {it.id: it for it in load_items(args.task)}
    responses = read_responses(args.responses, set(items), args.task)
    scores = score_items(
        args.task,
        items,
        responses,
        parallel=args.parallel,
        limits=SandboxLimits(timeout_s=args.timeout),
    )
    if args.per_item is not None:
        write_jsonl(args.per_item, [s.to_dict() for s in scores])
    print(json.dumps(summarize(args.task, scores)))
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m harness.commands.score ...`: this command alone."""
    parser = argparse.ArgumentParser(prog="specbench")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    register(sub)
    args = parser.parse_args(["score", *(sys.argv[1:] if argv is None else argv)])
    from harness.cli import dispatch

    return dispatch(args)


if __name__ == "__main__":
    sys.exit(main())
