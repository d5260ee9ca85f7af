"""The scripted engine over HTTP: wire format, metrics the project's parser reads, truth log."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest

from harness.engines.readout.metrics import acceptance_window, parse_metrics
from harness.engines.running.process import free_port
from harness.testengine.server import serve_in_thread
from harness.testengine.spec import ScriptedEngineSpec

# 1 ms steps: tests stay quick.
FAST: dict[str, Any] = {"weight_bytes": 1e9, "bandwidth_bytes_per_s": 1e12}
BODY = {
    "messages": [{"role": "user", "content": "hello there"}],
    "max_tokens": 40,
    "stream": True,
    "stream_options": {"include_usage": True, "continuous_usage_stats": True},
}


def sse_objects(text: str) -> list:
    out = []
    for block in text.split("\n\n"):
        if block.startswith("data: "):
            data = block[6:]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_stream_has_vllm_shape_and_usage_on_every_chunk(tmp_path) -> None:
    spec = ScriptedEngineSpec(num_draft_tokens=3, accept_probs=[0.9, 0.8, 0.7], **FAST)
    truth = tmp_path / "truth.jsonl"
    with serve_in_thread(spec, truth_log=truth) as eng:
        text = httpx.post(eng.base_url + "/v1/chat/completions", json=BODY, timeout=10).text
    events = sse_objects(text)
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert events[0]["usage"]["completion_tokens"] == 0
    assert events[-1] == "[DONE]"
    final = events[-2]
    assert final["choices"] == [] and final["usage"]["completion_tokens"] == 40
    figures = final["metrics"]["speculative_decoding"]
    assert (
        figures["num_spec_steps"] > 0
        and sum(figures["acceptance_histogram"]) == figures["num_spec_steps"]
    )
    token_chunks = [e for e in events[1:-2]]
    counts = [e["usage"]["completion_tokens"] for e in token_chunks]
    added = [b - a for a, b in zip([0, *counts], counts, strict=False)]
    assert all(1 <= n <= 4 for n in added) and sum(added) == 40
    assert token_chunks[-1]["choices"][0]["finish_reason"] == "length"
    rows = [json.loads(line) for line in truth.read_text().splitlines()]
    sent = [r["tokens"] for r in rows if r["kind"] == "chunk"]
    assert sent == added  # the truth log saw exactly the chunks the client got
    (req,) = [r for r in rows if r["kind"] == "request"]
    assert req["completion_tokens"] == 40 and req["first_t"] <= req["end_t"]


def test_per_token_chunking_and_no_usage_unless_asked() -> None:
    spec = ScriptedEngineSpec(
        num_draft_tokens=2, accept_probs=[1.0, 1.0], chunking="per_token", **FAST
    )
    body = {**BODY, "stream_options": {"include_usage": True}}
    with serve_in_thread(spec) as eng:
        events = sse_objects(
            httpx.post(eng.base_url + "/v1/chat/completions", json=body, timeout=10).text
        )
    token_chunks = events[1:-2]
    assert all("usage" not in e for e in token_chunks)
    assert len(token_chunks) == 40  # one chunk per token, three sent per step
    assert events[-2]["usage"]["completion_tokens"] == 40


def test_plain_endpoints_and_non_streaming() -> None:
    spec = ScriptedEngineSpec(served_model="tiny", **FAST)
    with serve_in_thread(spec) as eng, httpx.Client(base_url=eng.base_url, timeout=10) as c:
        assert c.get("/health").status_code == 200
        assert c.get("/v1/models").json()["data"][0]["id"] == "tiny"
        assert c.get("/version").json()["version"].startswith("scripted")
        assert c.get("/nowhere").status_code == 404
        assert c.post("/v1/chat/completions", content=b"{bad").status_code == 400
        done = c.post("/v1/chat/completions", json={**BODY, "stream": False}).json()
    assert done["usage"]["completion_tokens"] == 40
    assert done["choices"][0]["finish_reason"] == "length"
    assert len(done["choices"][0]["message"]["content"].split()) == 40


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_metrics_read_by_the_project_parser_match_what_was_served(dialect) -> None:
    spec = ScriptedEngineSpec(
        metrics_dialect=dialect, num_draft_tokens=3, accept_probs=[0.8, 0.6, 0.5], **FAST
    )
    body = {**BODY, "return_spec_tokens_details": True}
    with serve_in_thread(spec) as eng:
        before = parse_metrics(httpx.get(eng.metrics_url).text, dialect)
        finals = []
        for _ in range(4):
            events = sse_objects(
                httpx.post(eng.base_url + "/v1/chat/completions", json=body, timeout=10).text
            )
            # vLLM: on the final usage chunk; SGLang: in a chunk of its own before it.
            finals.append(
                next(e for e in events if isinstance(e, dict) and ("metrics" in e or "sglext" in e))
            )
        after = parse_metrics(httpx.get(eng.metrics_url).text, dialect)
    window = acceptance_window(before, after)
    assert window is not None and after.running == 0 and after.waiting == 0
    if dialect == "vllm":
        figures = [f["metrics"]["speculative_decoding"] for f in finals]
        assert window.drafts == sum(f["num_spec_steps"] for f in figures)
        assert window.accepted == sum(f["num_accepted_draft_tokens"] for f in figures)
        assert window.draft_tokens == sum(f["num_draft_tokens"] for f in figures)
        rates = window.per_position_rates
        assert rates is not None and len(rates) == 3 and rates == sorted(rates, reverse=True)
    else:
        figures = [f["sglext"]["spec_tokens_details"] for f in finals]
        assert window.drafts == sum(f["spec_verify_ct"] for f in figures)
        assert window.generation_tokens == 4 * 40
        assert after.engine_accept_length is not None
        # SGLang's own definitions: completion tokens per verify call, kept / proposed.
        for f in figures:
            assert f["spec_accept_length"] == pytest.approx(40 / f["spec_verify_ct"])
            assert sum(f["spec_correct_drafts_histogram"]) == f["spec_verify_ct"]
            assert (
                sum(j * n for j, n in enumerate(f["spec_correct_drafts_histogram"]))
                == f["spec_num_correct_drafts"]
            )
            assert f["spec_num_proposed_drafts"] == 3 * f["spec_verify_ct"]


def test_sglang_sends_its_figures_in_their_own_chunk_only_when_asked() -> None:
    spec = ScriptedEngineSpec(
        metrics_dialect="sglang", num_draft_tokens=2, accept_probs=[0.9, 0.5], **FAST
    )
    with serve_in_thread(spec) as eng:
        plain = sse_objects(
            httpx.post(eng.base_url + "/v1/chat/completions", json=BODY, timeout=10).text
        )
        asked = sse_objects(
            httpx.post(
                eng.base_url + "/v1/chat/completions",
                timeout=10,
                json={**BODY, "return_spec_tokens_details": True},
            ).text
        )
    assert not any("sglext" in e for e in plain if isinstance(e, dict))
    ext, usage, done = asked[-3:]
    assert done == "[DONE]" and usage["usage"]["completion_tokens"] == 40 and "sglext" not in usage
    assert ext["choices"] == [] and ext["usage"] is None
    assert ext["sglext"]["spec_tokens_details"]["spec_verify_ct"] > 0
    assert asked[-4]["choices"][0]["finish_reason"] == "length"  # after the finish chunk


@pytest.mark.parametrize(
    ("dialect", "series"),
    [
        ("vllm", "vllm:spec_decode_num_drafts_total"),
        ("sglang", "sglang:spec_verify_calls_total"),
    ],
)
def test_omit_series_leaves_a_counter_out_of_metrics(dialect, series) -> None:
    spec = ScriptedEngineSpec(
        metrics_dialect=dialect,
        num_draft_tokens=2,
        accept_probs=[0.9, 0.5],
        omit_series=[series],
        **FAST,
    )
    with serve_in_thread(spec) as eng:
        httpx.post(eng.base_url + "/v1/chat/completions", json=BODY, timeout=10)
        text = httpx.get(eng.metrics_url).text
    assert series.removesuffix("_total") not in text
    assert f"{dialect}:generation_tokens_total" in text  # only that one is gone
    assert parse_metrics(text, dialect).drafts is None


def test_omit_series_must_name_a_series_the_engine_exports() -> None:
    with pytest.raises(ValueError, match="'sglang:spec_verify_calls_total' is not a series"):
        ScriptedEngineSpec(omit_series=["sglang:spec_verify_calls_total"])  # a vLLM engine


def test_runs_as_a_module_with_a_spec_file(tmp_path) -> None:
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(ScriptedEngineSpec(**FAST).model_dump_json())
    truth = tmp_path / "truth.jsonl"
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness.testengine",
            "--spec",
            str(spec_path),
            "--port",
            str(port),
            "--truth-log",
            str(truth),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                httpx.get(url + "/health", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        reply = httpx.post(url + "/v1/chat/completions", json=BODY, timeout=10)
        assert reply.status_code == 200 and "[DONE]" in reply.text
    finally:
        proc.terminate()
        proc.wait(10)
    assert proc.returncode == 0
    assert '"kind": "request"' in truth.read_text()


def test_bad_spec_file_exits_2_with_one_line(tmp_path) -> None:
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps({"num_draft_tokens": 2}))
    proc = subprocess.run(
        [sys.executable, "-m", "harness.testengine", "--spec", str(spec_path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "accept_probs" in proc.stderr


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_frozen_spec_counters_are_exported_but_never_move(dialect) -> None:
    """A drafter arm whose engine drafts nothing, for the smoke stage's tests."""
    spec = ScriptedEngineSpec(
        metrics_dialect=dialect,
        num_draft_tokens=2,
        accept_probs=[0.9, 0.9],
        frozen_spec_counters=True,
        **FAST,
    )
    with serve_in_thread(spec) as eng:
        before = parse_metrics(httpx.get(eng.metrics_url).text, dialect)
        reply = httpx.post(eng.base_url + "/v1/chat/completions", json=BODY, timeout=10)
        assert reply.status_code == 200
        after = parse_metrics(httpx.get(eng.metrics_url).text, dialect)
    assert before.drafts == after.drafts == 0  # exported, still
    assert after.generation_tokens is not None
    assert before.generation_tokens is not None
    assert after.generation_tokens == before.generation_tokens + 40  # it did generate


def test_output_salt_changes_the_text_and_only_the_text() -> None:
    body = {**BODY, "stream": False}
    texts: dict[int, list[str]] = {}
    for salt in (0, 0, 7):
        spec = ScriptedEngineSpec(output_salt=salt, **FAST)
        with serve_in_thread(spec) as eng:
            done = httpx.post(eng.base_url + "/v1/chat/completions", json=body, timeout=10).json()
        texts.setdefault(salt, []).append(done["choices"][0]["message"]["content"])
        assert done["usage"]["completion_tokens"] == 40
    assert texts[0][0] == texts[0][1]  # a function of the prompt: the same on every engine
    assert texts[7][0] != texts[0][0] and len(texts[7][0].split()) == 40


def test_the_engine_log_names_its_declared_faults(tmp_path) -> None:
    spec = ScriptedEngineSpec(
        num_draft_tokens=1, accept_probs=[0.5], frozen_spec_counters=True, output_salt=3, **FAST
    )
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness.testengine",
            "--spec-json",
            spec.model_dump_json(),
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline().strip() for _ in range(3)]
    finally:
        proc.terminate()
        proc.wait(10)
    assert lines[0].startswith("scripted engine listening on")
    assert lines[1:] == [
        "WARNING scripted engine: speculation counters frozen (frozen_spec_counters): they"
        " never move",
        "WARNING scripted engine: output salted (output_salt 3): greedy text differs from an"
        " unsalted engine's",
    ]
