"""Cross-check against the real vLLM CPU build (n-gram k=3): /metrics vs the client.

The engine's counters over the cell and the client's per-chunk token counts describe
the same steps, so they must agree; a disagreement is a metric or parsing bug:
- generated tokens: engine delta == the sum of the clients' completion_tokens, exactly;
- accepted drafts: each decode chunk carries 1 + the drafts kept in its step, so the
  client's sum of (tokens - 1) over decode chunks estimates the engine's accepted
  counter. Tolerance: the engine counts drafts accepted past max_tokens or EOS (the
  known overcount: at most k per request, dropped from the final chunk), and a chunk
  can merge two steps under load (+1 each); we allow k per request.
- acceptance length: the engine's 1 + accepted/drafts covers only steps that drafted;
  an n-gram step that found no match sends a 1-token chunk with no draft, so the
  client's mean tokens per decode chunk is at most the engine's figure (plus the same
  slack), and equals 1 + client-accepted / (all decode chunks).
"""

from __future__ import annotations

import asyncio

import pytest

from harness.derived.itl import tokens_per_chunk
from harness.engines.readout.metrics import acceptance_window
from harness.measure.driver import run_cell
from harness.measure.patterns import ClosedLoop
from harness.measure.requests import RequestSpec
from harness.measure.scrape import MetricsScraper, per_second_series
from harness.records import RequestRecord

K = 3
MAX_TOKENS = 64
# Copy-heavy prompts give the n-gram drafter something to match.
PROMPTS = [
    "Repeat after me: the cat sat on the mat, the cat sat on the mat, the cat sat on the mat.",
    "Copy this list: red green blue, red green blue, red green blue, red green blue.",
    "Say again: one two three four, one two three four, one two three four.",
]


@pytest.mark.vllm
def test_metrics_acceptance_agrees_with_client_tokens_per_chunk(vllm_ngram) -> None:
    engine = vllm_ngram
    requests = [
        RequestSpec(f"p{i}", [{"role": "user", "content": p}], MAX_TOKENS)
        for i, p in enumerate(PROMPTS)
    ]
    records: list[RequestRecord] = []

    async def cell():
        async with MetricsScraper(
            metrics_url=engine.metrics_url,
            dialect=engine.metrics_dialect,
            interval_s=1.0,
            cell_id="xcheck",
        ) as scraper:
            await asyncio.sleep(1.2)  # a first snapshot before any request
            outcome = await run_cell(
                base_url=engine.base_url,
                model=engine.served_model,
                requests=requests,
                pattern=ClosedLoop(concurrency=2, requests=12),
                sampling={"temperature": 0.0, "seed": 0, "ignore_eos": True},
                extra_body=dict(engine.request_fields),
                cell_id="xcheck",
                attempt=1,
                on_record=records.append,
                timeout_s=300,
            )
            await asyncio.sleep(1.2)  # and one after the last
        return outcome, scraper.samples

    outcome, samples = asyncio.run(cell())
    assert outcome.n_ok == 12, [r.error for r in records if not r.ok]
    good = [s for s in samples if s.ok]
    assert len(good) >= 2, [s.error for s in samples]
    window = acceptance_window(good[0].snapshot, good[-1].snapshot)
    assert window is not None and window.drafts > 0, "the n-gram arm exported no drafts"

    # Every chunk's token count is known (continuous usage stats).
    assert all(None not in r.chunk_tokens for r in records)
    generated = sum(r.completion_tokens or 0 for r in records)
    assert window.generation_tokens == generated

    decode = [n for r in records for n in r.chunk_tokens[1:] if n is not None]
    client_accepted = sum(n - 1 for n in decode)
    slack = K * len(records)
    assert window.accepted is not None
    assert abs(window.accepted - client_accepted) <= slack, (
        f"engine accepted {window.accepted:.0f}, client saw {client_accepted}"
    )
    client_tpc = tokens_per_chunk(records)
    assert client_tpc == pytest.approx(1 + client_accepted / len(decode))
    assert window.acceptance_length is not None and client_tpc is not None
    assert client_tpc <= window.acceptance_length + slack / window.drafts, (
        f"client {client_tpc:.3f} tokens/chunk vs engine acceptance length "
        f"{window.acceptance_length:.3f}"
    )
    series = per_second_series(samples)
    assert (series["acceptance_length"].dropna() >= 1.0).all()
    print(
        f"engine acceptance length {window.acceptance_length:.3f} over {window.drafts:.0f} "
        f"drafts; client {client_tpc:.3f} tokens per decode chunk; accepted engine "
        f"{window.accepted:.0f} vs client {client_accepted}"
    )
