"""The scripted engine's chat logprobs (vLLM's shape), and an arm whose greedy output
diverges from its baseline's at a chosen token with a chosen margin (issue 29)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from harness.testengine.server import serve_in_thread
from harness.testengine.spec import ScriptedEngineSpec
from tests.testengine.test_server import BODY, FAST, sse_objects

# Multi-token chunks.
DRAFTING: dict[str, Any] = {"num_draft_tokens": 3, "accept_probs": [0.9, 0.8, 0.7], **FAST}
SCORED = {**BODY, "logprobs": True, "top_logprobs": 2}


def ask(spec: ScriptedEngineSpec, body: dict) -> str:
    with serve_in_thread(spec) as eng:
        reply = httpx.post(eng.base_url + "/v1/chat/completions", json=body, timeout=10)
    assert reply.status_code == 200, reply.text
    return reply.text


def token_chunks(text: str) -> list[dict]:
    return [
        e
        for e in sse_objects(text)
        if isinstance(e, dict) and e["choices"] and e["choices"][0]["delta"].get("content")
    ]


def entries(text: str) -> list[dict]:
    return [entry for e in token_chunks(text) for entry in e["choices"][0]["logprobs"]["content"]]


def words(text: str) -> list[str]:
    return [e["choices"][0]["delta"]["content"] for e in token_chunks(text)]


def margin(entry: dict) -> float:
    top = entry["top_logprobs"]
    return top[0]["logprob"] - top[1]["logprob"]


def test_without_logprobs_the_stream_is_as_before() -> None:
    plain = ask(ScriptedEngineSpec(**DRAFTING), BODY)
    # The model's scores are no part of a stream that did not ask: a tie changes nothing.
    tied = ask(ScriptedEngineSpec(tie_at_token=3, tie_margin=0.0, **DRAFTING), BODY)
    for text in (plain, tied):
        lines = [b for b in text.split("\n\n") if b.startswith("data: {")]
        assert lines and all(
            '"logprobs":null,"finish_reason"' in b for b in lines if '"choices":[{' in b
        )
        assert '"top_logprobs"' not in text and '"bytes"' not in text
    assert "".join(words(plain)) == "".join(words(tied))


def test_logprobs_give_one_entry_per_token_in_vllm_shape() -> None:
    text = ask(ScriptedEngineSpec(**DRAFTING), SCORED)
    chunks = token_chunks(text)
    counts = [e["usage"]["completion_tokens"] for e in chunks]
    added = [b - a for a, b in zip([0, *counts], counts, strict=False)]
    assert max(added) > 1  # some chunks carry several tokens
    for chunk, n in zip(chunks, added, strict=True):
        content = chunk["choices"][0]["logprobs"]["content"]
        assert len(content) == n
        assert "".join(e["token"] for e in content) == chunk["choices"][0]["delta"]["content"]
    scored = entries(text)
    assert len(scored) == 40
    assert "".join(e["token"] for e in scored) == "".join(words(text))
    for e in scored:
        assert set(e) == {"token", "logprob", "bytes", "top_logprobs"}
        assert e["bytes"] == list(e["token"].encode())
        assert len(e["top_logprobs"]) == 2
        assert e["top_logprobs"][0]["token"] == e["token"]
        assert e["top_logprobs"][0]["logprob"] == e["logprob"] < 0
        assert e["top_logprobs"][1]["token"] != e["token"]
        assert all(a["bytes"] == list(a["token"].encode()) for a in e["top_logprobs"])
        assert margin(e) == pytest.approx(5.0, abs=1e-6)
    # The role chunk carries no token, so no scores (as vLLM sends it).
    assert sse_objects(text)[0]["choices"][0]["logprobs"] is None


def test_asking_for_logprobs_does_not_change_the_text() -> None:
    assert words(ask(ScriptedEngineSpec(**DRAFTING), SCORED)) == words(
        ask(ScriptedEngineSpec(**DRAFTING), BODY)
    )


@pytest.mark.parametrize("top_n", [0, 1, 5, 20])
def test_top_logprobs_gives_exactly_n_alternatives_best_first(top_n) -> None:
    body = {**BODY, "logprobs": True, "top_logprobs": top_n}
    for e in entries(ask(ScriptedEngineSpec(logprob_margin=2.5, **DRAFTING), body)):
        top = e["top_logprobs"]
        assert len(top) == top_n
        assert [a["logprob"] for a in top] == sorted((a["logprob"] for a in top), reverse=True)
        assert len({a["token"] for a in top}) == top_n  # distinct words
        if top_n >= 2:
            assert margin(e) == pytest.approx(2.5, abs=1e-6)
        if top_n > 2:  # further words sit far below the two candidates
            assert top[1]["logprob"] - top[2]["logprob"] > 10


def test_logprobs_default_to_no_alternatives() -> None:
    scored = entries(ask(ScriptedEngineSpec(**DRAFTING), {**BODY, "logprobs": True}))
    assert len(scored) == 40 and all(e["top_logprobs"] == [] for e in scored)


@pytest.mark.parametrize("chunking", ["per_token", "per_request"])
def test_every_chunking_carries_the_same_scores(chunking) -> None:
    base = entries(ask(ScriptedEngineSpec(**DRAFTING), SCORED))
    other = ask(ScriptedEngineSpec(chunking=chunking, **DRAFTING), SCORED)
    assert entries(other) == base
    if chunking == "per_request":
        assert len(token_chunks(other)) == 1


def test_the_non_streamed_body_carries_the_scores() -> None:
    streamed = entries(ask(ScriptedEngineSpec(**DRAFTING), SCORED))
    done = json.loads(ask(ScriptedEngineSpec(**DRAFTING), {**SCORED, "stream": False}))
    choice = done["choices"][0]
    assert choice["logprobs"]["content"] == streamed
    assert "".join(e["token"] for e in streamed) == choice["message"]["content"]
    plain = json.loads(ask(ScriptedEngineSpec(**DRAFTING), {**BODY, "stream": False}))
    assert plain["choices"][0]["logprobs"] is None


def test_a_tie_and_a_numerics_flip_diverge_at_that_word_only() -> None:
    """Issue 29: both arms' target sees a near-tie at token 3; one arm's kernels rank
    the two the other way, so its text differs there, and its scores say why."""
    model = {"tie_at_token": 3, "tie_margin": 0.02, **DRAFTING}
    base_text = ask(ScriptedEngineSpec(**model), SCORED)
    flip_text = ask(ScriptedEngineSpec(flip_at_token=3, **model), SCORED)
    base, flip = entries(base_text), entries(flip_text)
    base_words = "".join(words(base_text)).split(" ")[1:]
    flip_words = "".join(words(flip_text)).split(" ")[1:]
    assert [i for i, (a, b) in enumerate(zip(base_words, flip_words, strict=True)) if a != b] == [2]
    assert [i for i, (a, b) in enumerate(zip(base, flip, strict=True)) if a != b] == [2]
    for scored in (base, flip):
        assert margin(scored[2]) == pytest.approx(0.02, abs=1e-6)
        assert all(
            margin(e) == pytest.approx(5.0, abs=1e-6) for i, e in enumerate(scored) if i != 2
        )
    b, f = base[2], flip[2]
    assert f["token"] != b["token"]
    assert f["top_logprobs"][0]["token"] == f["token"]  # its own ranking: its word first
    assert f["logprob"] == f["top_logprobs"][0]["logprob"]
    assert f["top_logprobs"][1]["token"] == b["token"]  # the baseline's word, just below
    assert b["top_logprobs"][1]["token"] == f["token"]  # the target's runner-up
    assert "".join(e["token"] for e in flip) == "".join(words(flip_text))


def test_a_flip_without_a_tie_keeps_a_token_the_target_did_not_prefer() -> None:
    base_text = ask(ScriptedEngineSpec(**DRAFTING), SCORED)
    flip_text = ask(ScriptedEngineSpec(flip_at_token=3, **DRAFTING), SCORED)
    base, flip = entries(base_text), entries(flip_text)
    assert [i for i, (a, b) in enumerate(zip(base, flip, strict=True)) if a != b] == [2]
    f = flip[2]
    assert f["top_logprobs"] == base[2]["top_logprobs"]  # the target's ranking, unchanged
    assert f["top_logprobs"][0]["token"] == base[2]["token"]
    assert f["token"] == f["top_logprobs"][1]["token"] != base[2]["token"]
    assert f["logprob"] == f["top_logprobs"][1]["logprob"]
    assert margin(f) == pytest.approx(5.0, abs=1e-6)


def test_a_flip_changes_the_text_without_logprobs_too() -> None:
    base = "".join(words(ask(ScriptedEngineSpec(**DRAFTING), BODY))).split(" ")
    flip = "".join(words(ask(ScriptedEngineSpec(flip_at_token=40, **DRAFTING), BODY))).split(" ")
    assert len(base) == len(flip) == 41  # the last word of 40, 1-based
    assert [i for i, (a, b) in enumerate(zip(base, flip, strict=True)) if a != b] == [40]


def test_output_salt_scores_its_own_words() -> None:
    base = entries(ask(ScriptedEngineSpec(**DRAFTING), SCORED))
    salted_text = ask(ScriptedEngineSpec(output_salt=7, **DRAFTING), SCORED)
    salted = entries(salted_text)
    assert "".join(e["token"] for e in salted) == "".join(words(salted_text))
    assert [e["token"] for e in salted] != [e["token"] for e in base]
    assert all(e["top_logprobs"][0]["token"] == e["token"] for e in salted)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs must be an integer from 0 to 20"),
        ({"logprobs": True, "top_logprobs": -1}, "top_logprobs must be an integer from 0 to 20"),
        ({"top_logprobs": 2}, "`logprobs` must be set to true"),
        ({"logprobs": "yes"}, "logprobs must be a boolean"),
    ],
)
def test_bad_logprobs_requests_are_refused(extra, message) -> None:
    with serve_in_thread(ScriptedEngineSpec(**FAST)) as eng:
        reply = httpx.post(
            eng.base_url + "/v1/chat/completions", json={**BODY, **extra}, timeout=10
        )
    assert reply.status_code == 400 and message in reply.json()["error"]["message"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("flip_at_token", 0),
        ("tie_at_token", 0),
        ("logprob_margin", 0.0),
        ("tie_margin", -0.1),
    ],
)
def test_spec_refuses_bad_divergence_fields(field, value) -> None:
    with pytest.raises(ValueError, match=field):
        ScriptedEngineSpec(**{field: value})
