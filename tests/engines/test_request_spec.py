"""Per-request speculation figures in each engine's real field names: a captured vLLM
0.32 response and SGLang's shape (tests/fixtures/*/README.md), parsed into records and
summed as a cell's third acceptance figure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.analysis.acceptance_requests import acceptance_disagreement, request_acceptance
from harness.derived.itl import tokens_per_chunk
from harness.engines.readout.request_spec import parse_request_speculation, request_speculation
from harness.measure.stream import _fill_from_events
from harness.records import RequestRecord, RequestSpeculation

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
VLLM_SSE = FIXTURES / "vllm" / "vllm-0.32-cpu-ngram-per-request-spec.sse"
VLLM_JSON = FIXTURES / "vllm" / "vllm-0.32-cpu-ngram-per-request-spec.json"
SGLANG_SSE = FIXTURES / "sglang" / "sglang-dspark-spec-tokens-details.sse"
SGLANG_JSON = FIXTURES / "sglang" / "sglang-dspark-spec-tokens-details.json"

VLLM_FIGURES = RequestSpeculation(
    engine="vllm", rounds=10, draft_tokens=29, accepted=11, histogram=[4, 3, 1, 2]
)
SGLANG_FIGURES = RequestSpeculation(
    engine="sglang", rounds=43, draft_tokens=215, accepted=63, histogram=[11, 14, 11, 4, 0, 3]
)


def streamed(path: Path, index: int = 0) -> RequestRecord:
    blocks = [b for b in path.read_bytes().split(b"\n\n") if b.strip()]
    rec = RequestRecord(
        cell_id="c", index=index, item_id=f"i{index}", scheduled_t=0.0, sent_t=0.0, end_t=99.0
    )
    _fill_from_events(rec, [(1.0 + 0.01 * i, b) for i, b in enumerate(blocks)])
    return rec


@pytest.mark.parametrize(
    ("path", "expected", "completion"),
    [(VLLM_SSE, VLLM_FIGURES, 48), (SGLANG_SSE, SGLANG_FIGURES, 106)],
)
def test_a_stream_carries_the_engines_figures_into_the_record(path, expected, completion):
    rec = streamed(path)
    assert rec.ok and rec.completion_tokens == completion
    assert rec.speculation == expected
    # The raw figures are kept as sent, in the engine's own names.
    if expected.engine == "vllm":
        assert rec.spec is not None
        assert rec.spec["num_spec_steps"] == 10 and rec.spec["mean_acceptance_length"] == 2.1
    else:
        assert rec.spec is not None
        assert rec.spec["spec_verify_ct"] == 43
        assert rec.spec is not None
        assert rec.spec["spec_accept_length"] == pytest.approx(106 / 43)
    # Both engines' histograms count rounds by drafts kept.
    assert sum(expected.histogram) == expected.rounds
    assert sum(j * n for j, n in enumerate(expected.histogram)) == expected.accepted


@pytest.mark.parametrize(
    ("path", "expected"), [(VLLM_JSON, VLLM_FIGURES), (SGLANG_JSON, SGLANG_FIGURES)]
)
def test_a_plain_response_carries_them_at_its_top_level(path, expected):
    found = request_speculation(json.loads(path.read_text()))
    assert found is not None
    raw, parsed = found
    assert parsed == expected and raw


def test_chunks_without_figures_and_figures_that_are_not_counts():
    assert request_speculation({"choices": [], "usage": {"completion_tokens": 3}}) is None
    assert request_speculation({"metrics": {"speculative_decoding": None}}) is None
    # SGLang answers a list for n > 1: one request's figures cannot be told apart.
    assert request_speculation({"sglext": {"spec_tokens_details": [{"spec_verify_ct": 1}]}}) is None
    good = {
        "num_spec_steps": 2,
        "num_accepted_draft_tokens": 1,
        "num_draft_tokens": 6,
        "acceptance_histogram": [1, 1, 0, 0],
    }
    parsed = parse_request_speculation("vllm", good)
    assert parsed is not None and parsed.rounds == 2
    for broken in (
        {**good, "num_spec_steps": None},
        {**good, "num_draft_tokens": -1},
        {**good, "num_accepted_draft_tokens": True},
        {**good, "num_spec_steps": 1.5},
        {**good, "acceptance_histogram": [1, "x"]},
        {k: v for k, v in good.items() if k != "num_accepted_draft_tokens"},
    ):
        assert parse_request_speculation("vllm", broken) is None, broken
    # vLLM's names are not SGLang's.
    assert parse_request_speculation("sglang", good) is None


def test_summed_over_a_cell_in_each_engines_own_formula():
    vllm = request_acceptance([streamed(VLLM_SSE, 0), streamed(VLLM_SSE, 1)])
    assert vllm is not None
    assert (vllm.engine, vllm.requests, vllm.rounds, vllm.accepted) == ("vllm", 2, 20, 22)
    assert vllm.draft_tokens == 58  # what the counters moved by (fixture README)
    assert vllm.histogram == [8, 6, 2, 4]
    assert vllm.accept_length_per_round == pytest.approx(1 + 22 / 20)  # vLLM's formula
    assert vllm.acceptance_rate == pytest.approx(22 / 58)
    sglang = request_acceptance([streamed(SGLANG_SSE)])
    assert sglang is not None
    # SGLang's: completion tokens per verify call (its spec_accept_length), pooled.
    assert sglang.accept_length_per_round == pytest.approx(106 / 43)
    assert sglang.histogram == SGLANG_FIGURES.histogram


def test_warmup_failed_and_figureless_requests_are_not_the_cells():
    warm, failed, bare = streamed(VLLM_SSE, 0), streamed(VLLM_SSE, 1), streamed(VLLM_SSE, 2)
    warm.phase = "warmup"
    failed.error, failed.error_kind = "stream dropped", "dropped"
    bare.speculation = None
    assert request_acceptance([warm, failed, bare]) is None
    summed = request_acceptance([warm, failed, bare, streamed(VLLM_SSE, 3)])
    assert summed is not None and summed.requests == 1


def test_client_steps_sit_below_the_rounds_where_steps_ran_without_drafts():
    """n-gram drafted on 10 of the stream's decode steps: per chunk the client sees fewer
    tokens than per round, which is no disagreement; SGLang counts the prefill's token."""
    for path in (VLLM_SSE, SGLANG_SSE):
        rec = streamed(path)
        client = tokens_per_chunk([rec])
        summed = request_acceptance([rec])
        assert summed is not None and client is not None
        rounds = summed.accept_length_per_round
        assert rounds is not None and client < rounds
        assert acceptance_disagreement(rounds, rounds, client) == (True, None)


def test_disagreement_beyond_the_tolerance_is_named():
    assert acceptance_disagreement(2.5, 2.45, 2.0) == (True, None)  # 2% apart
    agree, why = acceptance_disagreement(2.0, 2.5, 2.2)
    assert why is not None
    assert agree is False and "engine counters 2.000 vs per-request 2.500 (-20.0%)" in why
    agree, why = acceptance_disagreement(2.5, 2.5, 2.8)
    assert agree is False and why == "client 2.800 above per-request 2.500 (+12.0%)"
    assert acceptance_disagreement(2.5, None, 2.0) == (None, None)  # nothing to compare with
    assert acceptance_disagreement(None, 2.5, float("nan")) == (None, None)
    assert acceptance_disagreement(None, 2.5, 2.0) == (True, None)


def test_counters_are_checked_against_the_requests_in_their_window():
    """At 4 users and 8 measured requests the counters also counted 4 warm-up requests:
    measured alone 3.22 is 5% off the counters' 3.38, all twelve are not."""
    assert acceptance_disagreement(3.38, 3.22, 3.22, window=3.37) == (True, None)
    agree, why = acceptance_disagreement(3.38, 3.37, 3.37, window=3.0)
    assert agree is False
    assert why == (
        "engine counters 3.380 vs per-request 3.000 over the same requests"
        " (warm-up included) (+12.7%)"
    )


def test_per_position_rates_from_the_histograms_and_their_check():
    """Rounds keeping j drafts count at positions 1..j, as vLLM's per-position counter."""
    from harness.analysis.acceptance_requests import RequestAcceptance

    summed = RequestAcceptance(
        engine="vllm",
        requests=1,
        rounds=20,
        draft_tokens=60,
        accepted=30,
        completion_tokens=0,
        histogram=[5, 6, 3, 6],
        accept_length_per_round=2.5,
        acceptance_rate=0.5,
    )
    assert summed.per_position_rates == pytest.approx([0.75, 0.45, 0.30])
    assert acceptance_disagreement(
        2.5,
        2.5,
        2.4,
        engine_positions=[0.75, 0.45, 0.30],
        window_positions=summed.per_position_rates,
    ) == (True, None)
    # within 5 % of the first position's rate: 0.03 here
    assert (
        acceptance_disagreement(
            2.5, 2.5, 2.4, engine_positions=[0.77, 0.43, 0.30], window_positions=[0.75, 0.45, 0.30]
        )[0]
        is True
    )
    agree, why = acceptance_disagreement(
        2.5, 2.5, 2.4, engine_positions=[0.45, 0.75, 0.30], window_positions=[0.75, 0.45, 0.30]
    )
    assert agree is False
    assert why == (
        "per-position counters vs per-request histograms at position"
        " 1: 0.450 vs 0.750, 2: 0.750 vs 0.450"
    )
    assert acceptance_disagreement(
        2.5, 2.5, 2.4, engine_positions=None, window_positions=[0.75]
    ) == (True, None)  # SGLang: none
