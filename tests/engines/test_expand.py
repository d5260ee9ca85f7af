"""One `${VAR}` expander for `run` and `serve`, tried on the demo registration."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from harness.commands import serve
from harness.engines import get_engine_kind
from harness.engines.launch.base import expand_study
from harness.errors import InputError
from harness.prereg import load_study
from harness.run import session

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "cpu.yaml"  # what scripts/demo.sh runs
ENV = {"SPECBENCH_TINY_PAIR": "/models/pair", "SPECBENCH_VLLM_CPU_PYTHON": "/venv/bin/python"}


def test_run_and_serve_expand_the_demo_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    seen: dict = {}

    def fake_start(arm, study, log_dir, port=None):  # what serve would hand the engine
        seen.update(arm=arm, study=study)
        raise KeyboardInterrupt

    monkeypatch.setattr(session, "require_preflight", lambda study, arms: None)
    monkeypatch.setattr(serve, "start_engine", fake_start)
    args = argparse.Namespace(arm="cpu-ngram", prereg=str(DEMO), port=None, log_dir="/tmp/x")
    assert serve.run(args) == 130
    ran = expand_study(load_study(DEMO))
    assert seen["study"] == ran  # the study serve starts from is the one run executes
    assert seen["study"].model.id == "/models/pair/target"
    command = get_engine_kind("vllm-cpu").command(seen["arm"], seen["study"], "127.0.0.1", 8000)
    assert command[0] == "/venv/bin/python" and "/models/pair/target" in command
    assert not any("${" in part for part in command), command
    drafter = ran.arm("cpu-draft").drafter
    assert drafter is not None and drafter.model == "/models/pair/draft"


def test_an_unset_variable_is_named_with_where_it_is_used() -> None:
    study = load_study(DEMO)
    with pytest.raises(InputError, match="model.id: environment variable SPECBENCH_TINY_PAIR"):
        expand_study(study, {"SPECBENCH_VLLM_CPU_PYTHON": "/p"})
    with pytest.raises(InputError, match="arm 'cpu-base': .*SPECBENCH_VLLM_CPU_PYTHON"):
        expand_study(study, {"SPECBENCH_TINY_PAIR": "/m"})
    assert load_study(DEMO).model.id == "${SPECBENCH_TINY_PAIR}/target"  # the text as sealed
