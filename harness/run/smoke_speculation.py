"""A drafter's smoke speculation: its counter moves, its counts add up, it reaches its floor."""

from __future__ import annotations

from harness.derived.itl import tokens_per_chunk
from harness.dialects import Dialect
from harness.engines.readout.drafting import wait_for_drafting
from harness.engines.readout.metrics import counter_name, scrape_metrics
from harness.engines.running.engine_process import EngineProcess
from harness.prereg.schema import Drafter
from harness.records import RequestRecord, SmokeAcceptance, SmokeCounter

# Both engines count a request's drafts when it finishes, so the series can trail the
# stream's end a little: the after-scrape is retried this long before "did not move"
# (the rule itself, absent-before included: harness/engines/readout/drafting.py).
COUNTER_WAIT_S = 10.0

# Drafters that may skip a step (no match to propose from): their rounds are a lower bound.
MAY_SKIP_DRAFTING = {"ngram", "ngram_gpu", "suffix"}


def draft_count_problem(rec: RequestRecord, drafter: Drafter) -> str | None:
    """Whether a request's own speculation figures add up to its tokens: the first token
    comes from the prefill and each round gives its accepted drafts plus one, so
    rounds + accepted + 1 = completion_tokens (within one token). A request cut at
    max_tokens may have dropped up to k of its last round's tokens; a drafter that can
    skip steps (n-gram: no match) gives the plain steps between its rounds uncounted, so
    for it the sum is only a lower bound. None: they agree, or the engine sent none."""
    s, tokens = rec.speculation, rec.completion_tokens
    if s is None or tokens is None or not rec.ok:
        return None
    counted = s.rounds + s.accepted + 1
    cut = drafter.num_draft_tokens if rec.finish_reason == "length" else 0
    low = float("-inf") if drafter.method in MAY_SKIP_DRAFTING else tokens - 1
    if low <= counted <= tokens + cut + 1:
        return None
    return (
        f"item {rec.item_id}: the engine counted {s.rounds} rounds and {s.accepted}"
        f" accepted drafts (+1 for the prefill's token = {counted} tokens) for a request"
        f" of {tokens} completion tokens (finish {rec.finish_reason}): what a 'draft'"
        " counts does not match what the acceptance figures assume"
    )


def read_drafts(process: EngineProcess) -> tuple[float | None, str | None]:
    """The drafts counter now (None: the series is absent), or why /metrics failed."""
    result = scrape_metrics(process.metrics_url, process.metrics_dialect)
    if result.snapshot is None:
        return None, f"/metrics failed: {result.error}"
    return result.snapshot.drafts, None


def counter_check(
    process: EngineProcess, dialect: Dialect, before: tuple[float | None, str | None]
) -> SmokeCounter:
    """Whether the drafts counter moved past its reading before the prompts, by the
    drafting rule readiness uses too (harness/engines/readout/drafting.py)."""
    name = counter_name(dialect, "drafts")
    value, error = before
    if error is not None:
        return SmokeCounter(name=f"{name} ({error})", before=None, after=None, moved=False)
    reading = wait_for_drafting(
        lambda: read_drafts(process),
        dialect,
        drafter=True,
        before=value,
        over="the smoke prompts",
        wait_s=COUNTER_WAIT_S,
        poll_s=0.5,
    )
    if reading.problem is None:
        return SmokeCounter(name=name, before=value, after=reading.after, moved=True)
    label = name + (f" ({reading.error})" if reading.error else "")
    return SmokeCounter(name=label, before=value, after=reading.after, moved=False)


def acceptance_check(
    drafter: Drafter | None, records: list[RequestRecord]
) -> SmokeAcceptance | None:
    """The drafter's tokens per round over its smoke prompts against its floor (None:
    no floor registered). The client's chunks, so attached arms are measured alike."""
    floor = drafter.expect.acceptance_length_min if drafter and drafter.expect else None
    if floor is None:
        return None
    tpr = tokens_per_chunk(records)
    return SmokeAcceptance(tokens_per_round=tpr, floor=floor, below=tpr is None or tpr < floor)
