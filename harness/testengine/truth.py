"""The scripted engine's truth log: each chunk's and each request's true times, on the
monotonic clock the client on this host shares (`t` just after a write returned and `began`
just before it, so a kernel receive stamp, taken inside the write on loopback, lies
between the two whatever the machine's load)."""

from __future__ import annotations

import json
from typing import IO

from harness.testengine.sequence import Sequence


def log_chunks(
    truth: IO[str], seq: Sequence, sizes: list[int], t: float, began: float | None = None
) -> None:
    """A line per chunk of this write: its tokens and when it left."""
    for n in sizes:
        truth.write(
            json.dumps(
                {
                    "kind": "chunk",
                    "rid": seq.rid,
                    "i": seq.chunk_index,
                    "tokens": n,
                    "t": t,
                    "began": t if began is None else began,
                }
            )
            + "\n"
        )
        seq.chunk_index += 1


def log_request(
    truth: IO[str], seq: Sequence, reason: str, end_t: float, error: str | None
) -> None:
    """The request's line, once it has finished."""
    truth.write(
        json.dumps(
            {
                "kind": "request",
                "rid": seq.rid,
                "number": seq.number,
                "arrival_t": seq.arrival_t,
                "first_t": seq.first_t,
                "end_t": end_t,
                "completion_tokens": seq.generated,
                "finish_reason": reason,
                "error": error,
            }
        )
        + "\n"
    )
    truth.flush()
