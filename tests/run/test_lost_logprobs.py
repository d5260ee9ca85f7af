"""Identity exact whatever the engine streams (issue 47 part 1). SGLang 0.5.23 sends no
chunk for a step whose text is empty -- a step that ends inside a multi-byte character --
so that step's logprobs never reach the client (serving_chat.py `if delta:`), while its
usage counts the tokens. The baseline streams one token a step and loses the fragment's
entry; the drafter's steps carry several tokens and lose nothing: the two lists fall
out of step. Tokens are compared by bytes or id, never by text (two fragments of
different characters both print as U+FFFD).

The scripted engines speak SGLang's dialect and stream as 0.5.23 does
(harness/testengine/tokens.py); output token 3 is the first two bytes of a character and
token 4 its last byte."""

from __future__ import annotations

from harness.analysis.identity import token_divergence
from harness.measure.stream import Received, complete_record
from harness.records import RequestRecord, TokenLogprob
from tests.run.conftest import run_folder, specbench
from tests.run.test_near_ties import BEYOND, identity_under, smoke_lines
from tests.run.test_remeasure import said, study_file
from tests.run.test_smoke import specbench_errors

# Both arms in SGLang's dialect, token 3 split; the drafter keeps every draft of k = 4 in
# every round (steps of 1, 5, 5, ... tokens), so its step holding the fragment has text.
SGLANG = {"metrics_dialect": "sglang", "split_char_at_token": 3}
DRAFTER = {**SGLANG, "accept_probs": [1.0, 1.0, 1.0, 1.0], "accept_draws": "even"}


def lost_study(tmp_path, drafter: dict, base: dict | None = None):
    return study_file(
        tmp_path,
        base={**SGLANG, **(base or {})},
        drafter={**DRAFTER, **drafter},
        identity=BEYOND,
        recording={"smoke": True},
    )


def test_a_near_tie_after_a_lost_step_passes_and_the_smoke_goes_on(tmp_path):
    # A near-tie at output token 7, where the drafter arm's kernels rank the two the
    # other way round: numerics, past the character whose fragment the baseline lost.
    study = lost_study(tmp_path, {"tie_at_token": 7, "flip_at_token": 7}, {"tie_at_token": 7})
    results = tmp_path / "results"
    proc = specbench("run", str(study), "--results", str(results), "--no-report")
    run = run_folder(results)
    baseline = [
        line
        for line in (run / "smoke" / "requests.jsonl").read_text().splitlines()
        if '"cell_id":"smoke/base"' in line.replace(" ", "")
    ]
    assert baseline and all('"lost":true' in line.replace(" ", "") for line in baseline)
    (check,) = [r for r in smoke_lines(run) if r["kind"] == "identity"]
    assert check["status"] == "passed", said(proc)[-2000:]
    assert [(t["token_index"], t["kind"]) for t in check["near_ties"]] == [(6, "numeric")] * 2
    beyond = identity_under(run, study, "beyond_near_ties")
    arm = beyond.evidence["tasks"]["chat"]["arms"]["drafter"]
    assert beyond.status == "pass" and arm["divergence_kinds"] == {
        "numeric": 6,
        "real": 0,
        "unknown": 0,
    }, arm
    assert arm["mismatches"][0]["divergence"]["token_index"] == 6


def test_a_real_divergence_after_a_lost_step_still_stops_the_smoke(tmp_path):
    study = lost_study(tmp_path, {"flip_at_token": 7})
    proc = specbench(
        "run", str(study), "--results", str(tmp_path / "results"), "--no-report", check=False
    )
    assert proc.returncode == 1, said(proc)[-3000:]
    first = specbench_errors(proc)[0]
    assert "at token 6 " in first and "-- real: " in first, first


def test_a_divergence_between_two_fragments_is_read_by_bytes(tmp_path):
    # The drafter arm keeps the runner-up fragment at token 3 (both print as U+FFFD; their
    # bytes differ) at a near-tie: found at token 2 and numeric, not "the tokens agree".
    study = lost_study(tmp_path, {"tie_at_token": 3, "flip_at_token": 3}, {"tie_at_token": 3})
    proc = specbench("run", str(study), "--results", str(tmp_path / "results"), "--no-report")
    (check,) = [r for r in smoke_lines(run_folder(tmp_path / "results")) if r["kind"] == "identity"]
    assert check["status"] == "passed", said(proc)[-2000:]
    (tie, _) = check["near_ties"]
    assert (tie["token_index"], tie["kind"]) == (2, "numeric"), tie
    # The baseline never scored its fragment (a one-token step with no text): its bytes
    # come from its text, the near-tie from the drafter's side.
    assert tie["drafter_token"] == "\\xe4\\xb9" and tie["baseline_token"] == "\\xe4\\xb8"
    assert tie["baseline_margin"] is None and abs(tie["drafter_margin"] - 0.01) < 1e-6


def frag(raw: bytes) -> TokenLogprob:
    return TokenLogprob(
        token="\ufffd",
        logprob=-0.1,
        bytes=list(raw),
        top=[("\ufffd", -0.1, list(raw)), ("\ufffd", -3.0, [0xE4, 0xB9])],
    )


def word(text: str) -> TokenLogprob:
    return TokenLogprob(token=text, logprob=-0.1, top=[(text, -0.1), (" x", -3.0)])


def test_a_list_that_cannot_be_aligned_is_never_a_real_divergence():
    lost = TokenLogprob(token="", logprob=0.0, lost=True)
    drafter = [word(" a"), frag(b"\xe4\xb8"), frag(b"\xad"), word(" b"), word(" c")]
    baseline = [word(" a"), lost, frag(b"\xad"), word(" b"), word(" d")]
    # Aligned by the texts: the lost token covers the same bytes; the divergence is token 4.
    d = token_divergence(drafter, baseline, 0.5, " a中 b c", " a中 b d")
    assert (d.token_index, d.kind) == (4, "real")
    # The baseline's text does not hold its tokens: the lost run cannot be placed.
    d = token_divergence(drafter, baseline, 0.5, " a中 b c", " a中 b e")
    assert (d.token_index, d.kind) == (1, "unknown") and "cannot be aligned" in d.why
    # A lost token alone in its step is rebuilt from its bytes: its key is known, its
    # logprobs are not, so the drafter's side alone can show a near-tie there...
    other = [word(" a"), frag(b"\xe4\xb9"), frag(b"\xad"), word(" b"), word(" c")]
    other[1] = other[1].model_copy(
        update={"top": [("\ufffd", -0.1, [0xE4, 0xB9]), ("\ufffd", -0.11, [0xE4, 0xB8])]}
    )
    d = token_divergence(other, baseline, 0.5, " a乭 b c", " a中 b d")
    assert (d.token_index, d.kind, d.baseline_margin) == (1, "numeric", None)
    assert (d.drafter_token, d.baseline_token) == ("\\xe4\\xb9", "\\xe4\\xb8")
    # ... while two lost tokens of one step are compared by their bytes together: a
    # divergence among them cannot be read.
    two = [word(" a"), lost, lost, word(" b"), word(" d")]
    d = token_divergence(other, two, 0.5, " a乭 b c", " a中 b d")
    assert (d.token_index, d.kind) == (1, "unknown") and "differ among them" in d.why
    # No text at hand: never real either.
    assert token_divergence(drafter, baseline, 0.5).kind == "unknown"


def sse(content: str | None, tokens: int | None, entries: list[dict] | None) -> tuple[float, bytes]:
    import json

    chunk: dict = {
        "id": "x",
        "choices": []
        if content is None
        else [
            {
                "index": 0,
                "delta": {"content": content},
                "finish_reason": None,
                "logprobs": None if entries is None else {"content": entries},
            }
        ],
    }
    if tokens is not None:
        chunk["usage"] = {"prompt_tokens": 1, "completion_tokens": tokens}
    return 0.0, b"data: " + json.dumps(chunk).encode()


def entry(text: str, raw: bytes | None = None) -> dict:
    raw = raw if raw is not None else text.encode()
    return {
        "token": text,
        "logprob": -0.1,
        "bytes": list(raw),
        "top_logprobs": [{"token": text, "logprob": -0.1, "bytes": list(raw)}],
    }


def parsed(events: list[tuple[float, bytes]]) -> RequestRecord:
    rec = RequestRecord(cell_id="c", index=0, item_id="i", scheduled_t=0.0, sent_t=0.0)
    complete_record(rec, Received(events=[*events, (0.0, b"data: [DONE]")]))
    assert rec.error is None and rec.completion_tokens == 4
    return rec


def test_the_client_places_a_placeholder_for_each_token_counted_and_not_scored():
    # The fragment's step sent nothing: usage jumps by 2 at the next chunk.
    rec = parsed(
        [
            sse(" a", 1, [entry(" a")]),
            sse("中", 3, [entry("\ufffd", b"\xad")]),
            sse(" b", 4, [entry(" b")]),
        ]
    )
    assert [(t.shown, t.lost) for t in rec.token_logprobs or []] == [
        (" a", False),
        ("", True),
        ("\\xad", False),
        (" b", False),
    ]
    # Without per-chunk counts the entries after the first gap cannot be placed: those
    # whose bytes tile the text from its start are kept, the rest marked lost.
    rec = parsed(
        [
            sse(" a", None, [entry(" a")]),
            sse("中", None, [entry("\ufffd", b"\xad")]),
            sse(" b", None, [entry(" b")]),
            sse(None, 4, None),
        ]
    )
    assert [t.lost for t in rec.token_logprobs or []] == [False, True, True, True]
