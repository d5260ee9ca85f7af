"""Requests whose tokens the client did not see arrive one step at a time.

A per-user speed is (tokens - 1) / (end - first token): it is a measurement only if
the stamps between first token and end are the steps the engine took. When the
server flushes several steps in one write (its API process fell behind a fast
model), or the client reads them together, many tokens share one arrival stamp and
the span shrinks to nothing: the speed is then an artefact (the CPU demo once showed
two users "twenty times" faster than one this way). A request most of whose tokens
share one stamp is a burst; it has no per-user speed, and a speed cell where more
than the registered share (`recording.max_burst_share`) of its measured requests are
bursts is invalid (health.py).

A drafter's chunk legitimately carries up to k + 1 tokens under one stamp; with
k + 1 well under half of max_tokens, that is never "most" of a request.
"""

from __future__ import annotations

from collections import Counter

from harness.records import RequestRecord

BURST_SHARE = 0.5  # "most of its tokens": more than half


def largest_stamp_share(rec: RequestRecord) -> float | None:
    """The largest share of a request's output tokens that carry one arrival stamp.

    Chunks without a token count (no usage stats from the engine) count as one token."""
    if not rec.chunk_times:
        return None
    per_stamp: Counter[float] = Counter()
    for t, n in zip(rec.chunk_times, rec.chunk_tokens or [None] * len(rec.chunk_times),
                    strict=False):
        per_stamp[t] += 1 if n is None else n
    total = sum(per_stamp.values())
    return max(per_stamp.values()) / total if total else None


def is_burst(rec: RequestRecord) -> bool:
    """A successful request most of whose output tokens share one arrival stamp."""
    share = largest_stamp_share(rec)
    return rec.ok and share is not None and share > BURST_SHARE


def burst_share(records: list[RequestRecord]) -> float | None:
    """Share of the successful measured requests that are bursts (None: none measured)."""
    ok = [r for r in records if r.ok and r.phase == "measure" and r.chunk_times]
    return sum(is_burst(r) for r in ok) / len(ok) if ok else None
