"""Is the drafter drafting: the one rule over an arm's speculation counter.

Readiness asks it right after the warm-up (harness/engines/running/readiness.py), the smoke
over its greedy prompts (harness/run/smoke_speculation.py); both read the counter through
`wait_for_drafting` and judge each reading with `drafting_problem`. The counter is
`speculation_counter(dialect)` (vLLM `vllm:spec_decode_num_drafts_total`, SGLang
`sglang:spec_verify_calls_total`), the snapshot's `drafts`: None when the series is
absent.

- An arm without a drafter must not export it: its engine is running a speculative
  server, not the registered arm.
- A drafter arm's engine must export it once a request it drafted on has finished.
- Given a reading from before such requests (the smoke's), it must have risen past it.
  An absent series before counts as 0 in a dialect that creates the series only with
  the first finished request that verified drafts (SGLang); in one that exports it from
  the start (vLLM, with a speculative config) an absent series before is no reading to
  rise from.

Both engines count a request's rounds as it finishes, which can trail its stream's last
chunk, so the counter is read again until the rule holds or the caller's wait is over
(readiness `SPEC_COUNTER_GRACE_S`, the smoke `COUNTER_WAIT_S`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from harness.dialects import Dialect
from harness.engines.readout.metrics import speculation_counter

# Dialects whose counter appears only when the first request that verified drafts
# finishes (SGLang's TokenizerMetricsCollector creates it then): absent reads as 0.
CREATED_ON_FIRST_DRAFT: frozenset[Dialect] = frozenset({"sglang"})
# Why a drafter arm's engine may lack its speculation counter, by dialect.
MISSING_COUNTER_HINTS: dict[Dialect, str] = {
    "vllm": "vLLM exports it whenever a --speculative-config takes effect",
    "sglang": "SGLang added it in PR 25689, May 2026: releases before it lack it",
}
# For a dialect without a hint of its own.
DEFAULT_MISSING_COUNTER_HINT = (
    "an engine release without the series, or speculative settings that did not take effect"
)


class _Unread:
    def __repr__(self) -> str:
        return "UNREAD"


# `before` when no reading was taken before the requests (readiness): the counter
# need only be there, not have risen.
UNREAD: Final = _Unread()


def missing_counter_hint(dialect: Dialect) -> str:
    """Why a drafter arm's engine of this dialect may export no speculation counter."""
    return MISSING_COUNTER_HINTS.get(dialect, DEFAULT_MISSING_COUNTER_HINT)


def counter_floor(dialect: Dialect, before: float | None) -> float | None:
    """What a drafter arm's counter must rise past, from its reading before the requests
    (None: there is nothing to rise from)."""
    if before is None and dialect in CREATED_ON_FIRST_DRAFT:
        return 0.0
    return before


def drafting_problem(
    dialect: Dialect,
    *,
    drafter: bool,
    after: float | None,
    before: float | None | _Unread = UNREAD,
    over: str = "its requests",
) -> str | None:
    """Why the speculation counter says this arm is not drafting as registered, or None.

    `after`: the counter read after requests a drafter drafts on (None: absent);
    `before`: the reading before them (UNREAD: none was taken); `over`: those requests,
    in words ("its warm-up", "2 greedy requests"). A problem for a drafter arm begins
    with a verb whose subject is its engine ("exports no ...", "did not move ...").
    """
    metric = speculation_counter(dialect)
    if not drafter:
        if after is not None:
            return f"the arm has no drafter but the engine exports {metric}"
        return None
    if after is None:
        return (
            f"exports no {metric} after {over}, so this drafter arm's acceptance cannot"
            f" be measured ({missing_counter_hint(dialect)})"
        )
    if isinstance(before, _Unread):
        return None
    floor = counter_floor(dialect, before)
    if floor is None or after <= floor:
        was = "absent" if before is None else f"{before:g}"
        return f"did not move its {metric} over {over} ({was} -> {after:g})"
    return None


@dataclass(frozen=True)
class CounterReading:
    """The last reading `wait_for_drafting` took."""

    after: float | None  # the counter (None: absent, or the read failed)
    error: str | None  # why the read failed, or None
    problem: str | None  # drafting_problem over it (None: the arm drafts as registered)


def wait_for_drafting(
    read: Callable[[], tuple[float | None, str | None]],
    dialect: Dialect,
    *,
    drafter: bool,
    before: float | None | _Unread = UNREAD,
    over: str = "its requests",
    wait_s: float,
    poll_s: float,
) -> CounterReading:
    """Read the counter (`read()` -> (value, why the read failed or None)) until
    drafting_problem finds none or `wait_s` has passed; the last reading."""
    deadline = time.monotonic() + wait_s
    while True:
        after, error = read()
        problem = drafting_problem(dialect, drafter=drafter, after=after, before=before, over=over)
        if error is not None and problem is None:
            problem = error
        if problem is None or time.monotonic() >= deadline:
            return CounterReading(after=after, error=error, problem=problem)
        time.sleep(poll_s)
