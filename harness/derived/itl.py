"""Inter-token latency from a RequestRecord, per chunk and per token.

One chunk can carry several tokens (a verification step that kept drafts), so ITL per
chunk overstates the wait for each token. Per token, a chunk's interval is divided over
the tokens it carries; that needs per-chunk counts (continuous usage stats), and is
None for a request whose engine did not send them.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from harness.records import RequestRecord


def chunk_itl(rec: RequestRecord) -> list[float]:
    """Seconds between consecutive output-carrying chunks (the first chunk is TTFT)."""
    t = rec.chunk_times
    return [b - a for a, b in itertools.pairwise(t)]


def token_itl(rec: RequestRecord) -> list[float] | None:
    """One entry per token after the first chunk: its chunk's interval / its token count."""
    counts = [n for n in rec.chunk_tokens if n is not None]
    if len(counts) < len(rec.chunk_tokens):
        return None
    out: list[float] = []
    for gap, n in zip(chunk_itl(rec), counts[1:], strict=True):
        out.extend([gap / n] * n)
    return out


def tokens_per_chunk(records: Iterable[RequestRecord], skip_first: bool = True) -> float | None:
    """Mean output tokens per output-carrying chunk over successful requests.

    skip_first leaves out each request's first chunk: it carries the prefill's single
    token, not a verification step, so the mean compares with engine acceptance length.
    """
    tokens = chunks = 0
    for rec in records:
        known = [n for n in rec.chunk_tokens if n is not None]
        if not rec.ok or len(known) < len(rec.chunk_tokens):
            continue
        counts = known[1:] if skip_first else known
        tokens += sum(counts)
        chunks += len(counts)
    return tokens / chunks if chunks else None
