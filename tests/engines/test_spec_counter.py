"""A drafter arm whose engine exports no speculation counter after its warm-up does not
start: one line names the metric and the engine's version (issue 11). The scripted
engine plays an engine release without the counter (`omit_series`), in both dialects."""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path
from typing import Any

import psutil
import pytest

from harness.engines.running.lifecycle import start_engine
from harness.engines.running.process import free_port
from harness.errors import SpecbenchError
from harness.testengine import __version__ as SCRIPTED_VERSION
from tests.tiny_study import tiny_study

COUNTER = {"vllm": "vllm:spec_decode_num_drafts_total", "sglang": "sglang:spec_verify_calls_total"}
FAST: dict[str, Any] = {"weight_bytes": 1e9, "bandwidth_bytes_per_s": 1e12}


def scripted_arms(dialect: str, omit: list[str], drafting_base: bool = False) -> list[dict]:
    drafting = {"num_draft_tokens": 2, "accept_probs": [0.8, 0.5]}
    return [
        {
            "name": "base",
            "engine": "scripted",
            "launch": {"startup_timeout_s": 30},
            "scripted": {**FAST, "metrics_dialect": dialect, **(drafting if drafting_base else {})},
        },
        {
            "name": "drafter",
            "engine": "scripted",
            "launch": {"startup_timeout_s": 30},
            "baseline": "base",
            "drafter": {"method": "scripted-draft", "num_draft_tokens": 2},
            "scripted": {**FAST, "metrics_dialect": dialect, **drafting, "omit_series": omit},
        },
    ]


def scripted_engines() -> list[psutil.Process]:
    """This test process's scripted engines that omit a series: its own children only,
    since the suite's other workers start such engines too (seen: an SGLang-dialect one
    of another worker's, taken for a leftover here)."""
    out = []
    for p in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            cmd = p.cmdline()
            if "harness.testengine" in cmd and any('"omit_series":["' in a for a in cmd):
                out.append(p)
    return out


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_a_drafter_arm_without_its_counter_fails_to_start_in_one_line(
    tmp_path: Path, dialect: str
) -> None:
    metric = COUNTER[dialect]
    study = tiny_study(tmp_path, scripted_arms(dialect, [metric]))
    with pytest.raises(SpecbenchError) as caught:
        start_engine(study.arm("drafter"), study, tmp_path / "logs")
    lines = caught.value.lines
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith("arm 'drafter': scripted ")
    assert f"scripted {SCRIPTED_VERSION} exports no {metric} after its warm-up" in line
    assert "acceptance cannot be measured" in line
    hint = "PR 25689" if dialect == "sglang" else "--speculative-config"
    assert hint in line
    assert str(tmp_path / "logs" / "engine-drafter.log") in line
    # The engine it started is gone: nothing holds the port or lingers.
    assert not scripted_engines()


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_with_its_counter_the_same_arm_starts(tmp_path: Path, dialect: str) -> None:
    study = tiny_study(tmp_path, scripted_arms(dialect, []))
    with start_engine(study.arm("drafter"), study, tmp_path / "logs") as engine:
        assert engine.alive() and engine.info.version == SCRIPTED_VERSION


def test_a_drafter_free_arm_whose_engine_drafts_is_not_the_registered_arm(tmp_path: Path) -> None:
    # SGLang creates its verify counter only once a request verified drafts: after the
    # warm-up a no-drafter arm that has it is running a speculative server.
    study = tiny_study(tmp_path, scripted_arms("sglang", [], drafting_base=True))
    with pytest.raises(
        SpecbenchError, match="has no drafter but the engine exports sglang:spec_verify_calls_total"
    ):
        start_engine(study.arm("base"), study, tmp_path / "logs")


def test_the_failed_start_frees_its_port(tmp_path: Path) -> None:
    port = free_port()
    study = tiny_study(tmp_path, scripted_arms("sglang", [COUNTER["sglang"]]))
    with pytest.raises(SpecbenchError):
        start_engine(study.arm("drafter"), study, tmp_path, port=port)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # would raise if the engine still held it
