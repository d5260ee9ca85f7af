"""How late each chunk's arrival stamp could be.

A chunk is stamped with the arrival of the read that completed it. Kernel receive
stamps are exact for a read of one segment, but when the client falls behind, segments
wait in the socket and TCP merges them; a read then carries one stamp, the last
segment's, for every chunk in it. A chunk that shares its stamp with the stream's next
output chunk arrived somewhere between the stream's previous distinct stamp and its
own: that gap bounds its error. Every other chunk's bound is zero. (Events that carry
no output, the usage chunk and [DONE], follow the last output chunk within the same
engine step, microseconds apart, so sharing a read with them is not counted.) Thread
stamps, the fallback, have this bound too, on top of the stamping thread's own delay
that the lag probe measures.

The bound is conservative: two chunks an engine wrote back to back also share a read,
through no fault of the client. Neither engine does that: when its API server falls
behind, vLLM's output collector merges a request's outputs into one chunk, and
SGLang's tokenizer manager takes the latest of the outputs waiting for a request
(`out_list[-1]`) and yields once. With them a shared stamp means the client fell behind.
"""

from __future__ import annotations

from harness.records import RequestRecord


def stamp_bounds(rec: RequestRecord) -> list[float]:
    """Per output-carrying chunk: seconds its stamp could be later than its arrival."""
    times = rec.chunk_times
    bounds: list[float] = []
    previous = rec.sent_t  # nothing of the response can arrive before the request left
    for i, t in enumerate(times):
        shared = i + 1 < len(times) and times[i + 1] == t
        bounds.append(max(0.0, t - previous) if shared else 0.0)
        if not shared:
            previous = t
    return bounds
