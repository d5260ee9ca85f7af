"""A scripted engine in a background thread, and a helper to run one cell against it."""

from __future__ import annotations

import asyncio
from typing import Any

from harness.measure.driver import run_cell
from harness.measure.requests import RequestSpec
from harness.records import RequestRecord
from harness.rundir import Outcome

# 1 ms memory-bound steps: cells finish in well under a second.
FAST: dict[str, Any] = {"weight_bytes": 1e9, "bandwidth_bytes_per_s": 1e12}


def prompts(n: int = 5, max_tokens: int = 16) -> list[RequestSpec]:
    return [
        RequestSpec(
            f"item-{i}", [{"role": "user", "content": f"prompt {i} " * (i + 1)}], max_tokens
        )
        for i in range(n)
    ]


def run(
    base_url: str, pattern, *, requests: list[RequestSpec] | None = None, on_record=None, **kwargs
) -> tuple[Outcome, list[RequestRecord]]:
    """Run one cell; on_record, if given, also sees each record as the driver hands it over."""
    records: list[RequestRecord] = []

    def keep(rec: RequestRecord) -> None:
        records.append(rec)
        if on_record is not None:
            on_record(rec)

    outcome = asyncio.run(
        run_cell(
            base_url=base_url,
            model="scripted",
            requests=requests or prompts(),
            pattern=pattern,
            sampling={"temperature": 0.0, "seed": 0},
            extra_body={},
            cell_id="cell",
            attempt=1,
            on_record=keep,
            **kwargs,
        )
    )
    return outcome, records


def scripted_text(messages: list[dict], n: int) -> str:
    """What the scripted engine answers these messages with (a function of them alone)."""
    from harness.testengine.sequence import prompt_key
    from harness.testengine.tokens import WORDS, mix

    key = prompt_key(messages)
    return "".join(" " + WORDS[mix(key, i) % len(WORDS)] for i in range(n))
