"""Turning real vLLM streams (captured fixtures) into RequestRecords, and ITL from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.derived.itl import chunk_itl, token_itl, tokens_per_chunk
from harness.measure.stream import StreamError, _fill_from_events
from harness.records import RequestRecord

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def fixture_events(name: str) -> list[tuple[float, bytes]]:
    path = FIXTURES / name
    assert path.exists(), f"missing fixture {path}"
    blocks = [b for b in path.read_bytes().split(b"\n\n") if b.strip()]
    return [(10.0 + 0.01 * i, b) for i, b in enumerate(blocks)]  # one chunk per 10 ms


def blank() -> RequestRecord:
    return RequestRecord(cell_id="c", index=0, item_id="x", scheduled_t=9.0, sent_t=9.0)


def test_continuous_usage_gives_tokens_per_chunk() -> None:
    rec = blank()
    rec.end_t = 99.0
    _fill_from_events(rec, fixture_events("vllm-0.32-cpu-ngram-stream-continuous-usage.sse"))
    assert rec.completion_tokens == 96 and rec.finish_reason == "length"
    assert rec.chunk_tokens[:9] == [1, 1, 1, 1, 1, 3, 3, 1, 1]  # as the fixture README says
    counts = [n for n in rec.chunk_tokens if n is not None]
    assert len(counts) == len(rec.chunk_tokens) and sum(counts) == 96 and max(counts) <= 4
    assert rec.first_token_t == pytest.approx(10.01)  # the role chunk carries no token
    assert rec.response_id == "chatcmpl-91b4deca1283b65c"
    assert rec.output_text.startswith(" (- boSET")
    per_token = token_itl(rec)
    assert per_token is not None and len(per_token) == 96 - counts[0]
    # A chunk that carried 3 tokens after a 10 ms gap means 3.3 ms per token, not 10.
    assert per_token[4:7] == pytest.approx([0.01 / 3] * 3)
    assert chunk_itl(rec) == pytest.approx([0.01] * (len(rec.chunk_times) - 1))


def test_final_usage_only_leaves_chunk_counts_unknown() -> None:
    rec = blank()
    _fill_from_events(rec, fixture_events("vllm-0.32-cpu-ngram-stream-final-usage.sse"))
    assert rec.completion_tokens == 96
    assert rec.chunk_tokens and all(n is None for n in rec.chunk_tokens)
    assert token_itl(rec) is None  # per-chunk ITL only
    assert len(chunk_itl(rec)) == len(rec.chunk_times) - 1
    assert tokens_per_chunk([rec]) is None


def test_malformed_chunk_and_missing_done_are_errors() -> None:
    good = fixture_events("vllm-0.32-cpu-ngram-stream-continuous-usage.sse")
    broken = good[:5] + [(11.0, b'data: {"id": "x", "choices": [{"delta')] + good[5:]
    with pytest.raises(StreamError) as err:
        _fill_from_events(blank(), broken)
    assert err.value.kind == "malformed"
    with pytest.raises(StreamError) as err:
        _fill_from_events(blank(), good[:10])
    assert err.value.kind == "dropped"


def test_tokens_per_chunk_skips_prefill_chunk_and_failed_requests() -> None:
    ok = blank()
    ok.chunk_times, ok.chunk_tokens = [1.0, 2.0, 3.0], [1, 4, 2]
    failed = blank()
    failed.chunk_times, failed.chunk_tokens, failed.error = [1.0, 2.0], [1, 4], "boom"
    assert tokens_per_chunk([ok, failed]) == pytest.approx(3.0)
    assert tokens_per_chunk([ok], skip_first=False) == pytest.approx(7 / 3)


def test_a_real_vllm_stream_splits_into_rounds_with_or_without_per_chunk_counts() -> None:
    """A vLLM 0.32 CPU n-gram stream (the fixture), one chunk a step: the decomposition
    (analysis/decompose.py) reads its rounds, and from the usage alone without counts."""
    from harness.analysis.decompose import request_rounds

    rec = blank()
    _fill_from_events(rec, fixture_events("vllm-0.32-cpu-ngram-stream-continuous-usage.sse"))
    rec.end_t = rec.chunk_times[-1]
    rounds = request_rounds(rec)
    assert rounds is not None
    assert rounds.tokens == 96 - (rec.chunk_tokens[0] or 0)
    assert rounds.rounds == len(rec.chunk_times) - 1
    assert rounds.tokens_per_round == pytest.approx(tokens_per_chunk([rec]))
    assert rounds.round_time_s == pytest.approx(0.01)  # the fixture's 10 ms a chunk
    bare = blank()
    _fill_from_events(bare, fixture_events("vllm-0.32-cpu-ngram-stream-final-usage.sse"))
    bare.end_t = bare.chunk_times[-1]
    bare_rounds = request_rounds(bare)  # completion_tokens less the first chunk's one
    assert bare_rounds is not None and bare_rounds.tokens == 95
