"""Requests whose tokens the client did not see arrive one step at a time.

A per-user speed is (tokens - 1) / (end - first token): it is a measurement only if
the stamps between first token and end are the steps the engine took. When the
server flushes several steps in one write (its API process fell behind a fast
model), or the client reads them together, tokens of several steps share one arrival
stamp and the span shrinks to nothing: the speed is then an artefact (the CPU demo once
showed two users "twenty times" faster than one this way). Such a request is a burst;
it has no per-user speed, and a speed cell where more than the registered share
(`recording.max_burst_share`) of its measured requests are bursts is invalid
(health.py).

Steps read together show up in a record (harness/records.py: one chunk_times /
chunk_tokens entry per SSE event that carried output) in two ways: several chunks
under one stamp (events written or read together), or one chunk of many tokens (vLLM
merges the outputs its API process had not yet sent into one event). But one step of
a drafter is one round, and a fully accepted round is one chunk of up to k + 1 tokens
(k = the drafter's num_draft_tokens): that is one step, not several, however much of
the answer it is (a DFlash round of 16 tokens is 0.8 of a 20-token answer; an EAGLE-3
round of 4, most of a 7-token one). Judging such a chunk as a burst would drop short
answers' speeds on the drafter side only, while the baseline keeps the same items.

So, with the arm's k known: a stamp is one step when it carries a single chunk of at
most k + 1 tokens (k = 0 without a drafter: one token). A request is a burst when a
stamp that is not one step (several chunks, or a chunk larger than a round) carries
more than half of its tokens. With k unknown, the rule is the one before rounds were
known: any stamp carrying more than half the tokens, which a drafter's round can only
pass in an answer shorter than about twice the round.

SGLang's DFlash registers k as its block, which is its verify window, so a round there
holds at most k tokens: k + 1 leaves it one token of slack in a chunk, no more.
"""

from __future__ import annotations

from collections import Counter

from harness.records import RequestRecord

BURST_SHARE = 0.5  # "most of its tokens": more than half


def _stamps(rec: RequestRecord) -> tuple[Counter[float], Counter[float], Counter[float]]:
    """Per arrival stamp: its tokens, its chunks, and its largest chunk's tokens.
    A chunk without a token count (no usage stats from the engine) counts as one token."""
    tokens: Counter[float] = Counter()
    chunks: Counter[float] = Counter()
    largest: Counter[float] = Counter()
    counts = rec.chunk_tokens or [None] * len(rec.chunk_times)
    for t, n in zip(rec.chunk_times, counts, strict=False):
        n = 1 if n is None else n
        tokens[t] += n
        chunks[t] += 1
        largest[t] = max(largest[t], n)
    return tokens, chunks, largest


def largest_stamp_share(rec: RequestRecord) -> float | None:
    """The largest share of a request's output tokens that carry one arrival stamp."""
    if not rec.chunk_times:
        return None
    tokens, _, _ = _stamps(rec)
    total = sum(tokens.values())
    return max(tokens.values()) / total if total else None


def merged_stamp_share(rec: RequestRecord, num_draft_tokens: int | None) -> float | None:
    """The largest share of a request's output tokens under one stamp that more than one
    step delivered: several chunks, or a chunk of more than num_draft_tokens + 1 tokens
    (0: no drafter). num_draft_tokens None (unknown): every stamp counts, as before
    rounds were known. 0.0 when every stamp is one step; None without chunks."""
    if not rec.chunk_times:
        return None
    if num_draft_tokens is None:
        return largest_stamp_share(rec)
    tokens, chunks, largest = _stamps(rec)
    total = sum(tokens.values())
    if not total:
        return None
    round_max = num_draft_tokens + 1
    merged = [n for t, n in tokens.items() if chunks[t] > 1 or largest[t] > round_max]
    return max(merged, default=0) / total


def is_burst(rec: RequestRecord, num_draft_tokens: int | None = None) -> bool:
    """A successful request most of whose output tokens came from several steps under one
    stamp. num_draft_tokens: the arm's k (0: no drafter; None: unknown, any stamp)."""
    share = merged_stamp_share(rec, num_draft_tokens)
    return rec.ok and share is not None and share > BURST_SHARE


def burst_share(records: list[RequestRecord], num_draft_tokens: int | None = None) -> float | None:
    """Share of the successful measured requests that are bursts (None: none measured)."""
    ok = [r for r in records if r.ok and r.phase == "measure" and r.chunk_times]
    return sum(is_burst(r, num_draft_tokens) for r in ok) / len(ok) if ok else None
