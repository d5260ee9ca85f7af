"""Readiness probes are small functions that return a problem (one sentence) or None,
over an endpoint that answers as a real vLLM 0.32 does (its captured /metrics): what
`wait_ready` turns into a start failure, one probe at a time."""

from __future__ import annotations

from pathlib import Path

import httpx

from harness.engines.running.engine_process import EngineProcess
from harness.engines.running.readiness import (
    metrics_problem,
    served_model_problem,
    speculation_counter_problem,
    warm_up_problem,
)
from harness.prereg import load_study
from harness.rundir.engines import EngineInfo

ROOT = Path(__file__).resolve().parents[2]
VLLM = ROOT / "tests" / "fixtures" / "vllm"
NGRAM_METRICS = (VLLM / "vllm-0.32-cpu-ngram-k3.metrics.txt").read_text()
PLAIN_METRICS = (VLLM / "vllm-0.32-cpu-nodrafter.metrics.txt").read_text()
STREAM = 'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'


def endpoint(models=("scripted",), metrics=NGRAM_METRICS, stream=STREAM, chat_status=200):
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": m} for m in models]})
        if request.url.path == "/metrics":
            return httpx.Response(200, text=metrics)
        if request.url.path == "/v1/chat/completions":
            return httpx.Response(chat_status, text=stream)
        return httpx.Response(404)

    return httpx.Client(transport=httpx.MockTransport(answer))


def engine(arm_name: str) -> EngineProcess:
    study = load_study(ROOT / "examples" / "scripted-pass.yaml")
    arm = study.arm(arm_name)
    info = EngineInfo(
        arm=arm.name,
        kind="vllm",
        metrics_dialect="vllm",
        started_wall=0.0,
        started_iso="-",
        launched=False,
        base_url="http://engine",
        served_model="scripted",
    )
    return EngineProcess(arm=arm, kind=None, info=info, request_fields={})


def test_the_served_model_probe():
    assert served_model_problem(engine("base"), endpoint()) is None
    assert served_model_problem(engine("base"), endpoint(models=("other",))) == (
        "serves ['other'], not the registered model 'scripted'"
    )


def test_the_warm_up_probe():
    assert warm_up_problem(engine("base"), endpoint(), 5.0) is None
    said = warm_up_problem(engine("base"), endpoint(chat_status=500), 5.0)
    assert said is not None and said.startswith("warm-up request failed: HTTP 500")
    said = warm_up_problem(engine("base"), endpoint(stream="data: {}\n\n"), 5.0)
    assert said == "warm-up stream ended early (1 chunks, [DONE] seen: False)"


def test_the_metrics_and_speculation_counter_probes():
    assert metrics_problem(engine("drafter"), endpoint()) is None
    assert speculation_counter_problem(engine("drafter"), endpoint()) is None
    assert speculation_counter_problem(engine("base"), endpoint(metrics=PLAIN_METRICS)) is None
    # A no-drafter arm whose engine drafts is not the registered arm.
    said = speculation_counter_problem(engine("base"), endpoint())
    assert said is not None and "vllm:spec_decode_num_drafts_total" in said


def test_an_unusable_metrics_page_is_a_problem():
    said = metrics_problem(engine("drafter"), endpoint(metrics="not a metric line {"))
    assert said is not None and said.startswith("/metrics is unusable"), said
