"""The scripted engine as an engine kind (started like any engine), and real process death."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import httpx

from harness.engines import get_engine_kind
from harness.engines.running.lifecycle import start_engine
from harness.engines.running.process import free_port
from harness.measure.driver import run_cell
from harness.measure.patterns import ClosedLoop
from harness.measure.requests import RequestSpec
from harness.prereg import load_study
from harness.records import RequestRecord
from harness.testengine.spec import FailureInjection, ScriptedEngineSpec

ROOT = Path(__file__).resolve().parents[2]
REQUESTS = [RequestSpec("a", [{"role": "user", "content": "hi"}], 12)]


def cell(base_url: str, model: str, n: int, extra_body: dict | None = None):
    records: list[RequestRecord] = []
    outcome = asyncio.run(
        run_cell(
            base_url=base_url,
            model=model,
            requests=REQUESTS,
            pattern=ClosedLoop(concurrency=2, requests=n),
            sampling={"temperature": 0.0},
            extra_body=extra_body or {},
            cell_id="k",
            attempt=1,
            on_record=records.append,
            timeout_s=10,
        )
    )
    return outcome, records


def test_scripted_arm_starts_serves_and_stops_like_any_engine(tmp_path) -> None:
    study = load_study(ROOT / "examples" / "scripted-pass.yaml")
    arm = study.arm("drafter")
    kind = get_engine_kind("scripted")
    assert kind.dialect_for(arm) == "vllm"
    assert arm.scripted is not None
    assert kind.effective_max_running(arm) == arm.scripted.max_batch
    assert "--spec-json" in kind.command(arm, study, "127.0.0.1", 8000)
    engine = start_engine(arm, study, tmp_path)
    try:
        assert engine.served_model == study.model.request_name
        outcome, records = cell(
            engine.base_url, engine.served_model, 6, kind.request_fields(arm, study)
        )
        assert outcome.n_ok == 6
        assert all(r.speculation is not None and r.speculation.rounds > 0 for r in records)
        assert all(r.spec["num_spec_steps"] == r.speculation.rounds for r in records)
        assert httpx.get(engine.metrics_url).status_code == 200
    finally:
        engine.stop()
    assert not engine.alive()


def test_die_ends_the_engine_process_and_the_cell_still_finishes(tmp_path) -> None:
    spec = ScriptedEngineSpec(
        weight_bytes=1e9,
        bandwidth_bytes_per_s=1e12,
        failures=[FailureInjection(mode="die", requests=[3])],
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
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                httpx.get(url + "/health", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        outcome, records = cell(url, "scripted", 8)
        assert proc.wait(10) == 3  # the process really died
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert len(records) == 8 and outcome.n_errors >= 6
    assert {r.error_kind for r in records if not r.ok} <= {"dropped", "connect"}
