"""Engine facts live on the engine kind (issue 31, part 3): a new engine that speaks an
existing metrics dialect is one module with an EngineKind subclass plus its entry in the
registry, and a study runs on it end to end. This module is that one module: ToyKind is
defined here and registered at run time, nothing else is added anywhere. And the one
rule for "is the drafter drafting" (harness/engines/readout/drafting.py), which readiness and the
smoke both ask."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import pytest
import yaml

from harness.cli import main
from harness.dialects import DIALECTS, Dialect
from harness.engines import ENGINE_KINDS, get_engine_kind
from harness.engines.launch.scripted import ScriptedKind
from harness.engines.readout.drafting import (
    DEFAULT_MISSING_COUNTER_HINT,
    drafting_problem,
    missing_counter_hint,
    wait_for_drafting,
)
from harness.prereg import load_study
from harness.prereg.schema import Arm, Study
from harness.run.where import engine_versions
from harness.rundir.engines import EngineEnvironment
from harness.testengine.spec import ScriptedEngineSpec
from tests.run.conftest import (
    pdf_text,
    run_folder,
    scripted_arms,
    scripted_bars,
    scripted_recording,
    verdict_of,
    write_scripted_study,
)


class ToyKind(ScriptedKind):
    """A new engine kind that speaks SGLang's dialect, played by the scripted engine."""

    name: ClassVar[str] = "toy"
    metrics_dialect: ClassVar[Dialect] = "sglang"

    def spec(self, arm: Arm) -> ScriptedEngineSpec:  # type: ignore[override]
        # The scripted engine serves this kind's dialect, whatever the arm's spec says.
        return ScriptedKind.spec(arm).model_copy(update={"metrics_dialect": self.metrics_dialect})


@pytest.fixture
def toy_registered(monkeypatch):
    """The registry entry: the only registration a new engine kind needs."""
    monkeypatch.setitem(ENGINE_KINDS, ToyKind.name, ToyKind())


def toy_study(folder: Path) -> Path:
    """The smallest study that reaches a verdict: a baseline and a drafter on the toy
    engine, speed cells at one user, the smoke on (the drafting rule, the counter moving)
    and the host's regime timing off."""
    return write_scripted_study(
        folder,
        "toy",
        "A toy engine kind registered by a test module",
        registered="2026-11-30",
        hardware={"gpu": "toy (no GPU)", "memory_bandwidth_gb_s": 2000, "dense_tflops": 40},
        arms=scripted_arms(
            [0.9, 0.85, 0.8, 0.75], engine="toy", drafter={"assumed_acceptance_length": 3.7}
        ),
        loads={
            "closed_loop": {
                "concurrency": [1],
                "requests": {"min": 8, "per_user": 1},
                "warmup_per_user": 1,
            }
        },
        tasks=[{"name": "chat", "kind": "chat", "uses": ["speed"], "max_tokens": 32, "subset": 16}],
        recording=scripted_recording(smoke=True),
        bars=scripted_bars(speed={"concurrencies": [1]}, identity=None, accuracy=None),
    )


def test_an_engine_name_is_one_the_registry_holds(tmp_path, capsys):
    study = toy_study(tmp_path)
    code = main(["validate", str(study)])
    err = capsys.readouterr().err
    assert code == 2
    (line,) = [ln for ln in err.splitlines() if ": arms[0].engine:" in ln]
    known = ", ".join(repr(k) for k in ENGINE_KINDS)
    assert line.endswith(f"unknown engine 'toy' (known engines: {known})"), line


def test_a_registered_kind_is_an_engine_name_and_a_scripted_one_takes_a_spec(
    tmp_path, toy_registered
):
    study = load_study(toy_study(tmp_path))
    assert [a.engine for a in study.arms] == ["toy", "toy"]
    kind = get_engine_kind("toy")
    assert kind.dialect_for(study.arm("drafter")) == "sglang"
    assert kind.distribution is None  # no package list names the scripted engine's build
    data = yaml.safe_load((tmp_path / "toy.yaml").read_text())
    del data["arms"][0]["scripted"]
    with pytest.raises(ValueError, match="scripted is required for engine 'toy'"):
        Study.model_validate(data)


def test_a_study_runs_end_to_end_on_a_kind_a_test_module_registered(
    tmp_path, capsys, toy_registered
):
    results = tmp_path / "results"
    code = main(
        [
            "run",
            str(toy_study(tmp_path)),
            "--results",
            str(results),
            "--reports",
            str(tmp_path / "reports"),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, (out + err)[-4000:]
    run = run_folder(results)
    verdict = verdict_of(run)
    assert verdict["verdict"] == "PASS", json.dumps(verdict, indent=1)[:3000]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    starts = [e for entries in manifest["engines"].values() for e in entries]
    assert starts and {(e["kind"], e["metrics_dialect"]) for e in starts} == {("toy", "sglang")}
    # The smoke asked the drafting rule of the toy's dialect: SGLang's counter, moved.
    smoke = [json.loads(ln) for ln in (run / "smoke" / "arms.jsonl").read_text().splitlines()]
    (drafter,) = [r for r in smoke if r.get("arm") == "drafter" and r["kind"] == "arm"]
    assert drafter["status"] == "passed"
    assert drafter["counter"]["name"] == "sglang:spec_verify_calls_total"
    assert drafter["counter"]["moved"]
    cells = {json.loads(p.read_text())["cell"]["id"] for p in (run / "cells").glob("*/cell.json")}
    assert {"base/chat/speed/c001", "drafter/chat/speed/c001"} <= cells
    # The report asks the kind for its dialect, not the engine's name, where SGLang's
    # counters leave a page empty: no per-position acceptance in the toy's dialect.
    pdf = tmp_path / "reports" / f"{run.name}.pdf"
    text = pdf_text(pdf)
    assert "per-position acceptance not exported by toy" in text


def test_a_cells_engine_version_is_its_kinds_distribution(tmp_path, toy_registered):
    study = load_study(toy_study(tmp_path))
    envs = {
        "/toy/python": EngineEnvironment(
            python="/toy/python",
            arms=["base", "drafter"],
            listed_wall=0.0,
            packages=[{"name": "sglang", "version": "0.5.23"}],
        )
    }
    assert engine_versions(study, envs) == {"base": None, "drafter": None}
    real = study.model_copy(
        update={
            "arms": [
                a.model_copy(update={"engine": "sglang", "scripted": None}) for a in study.arms
            ]
        }
    )
    assert engine_versions(real, envs) == {"base": "sglang 0.5.23", "drafter": "sglang 0.5.23"}


# --- the drafting rule ---------------------------------------------------------------


@pytest.mark.parametrize("dialect", DIALECTS)
def test_readiness_asks_only_that_a_drafters_counter_is_there(dialect):
    assert drafting_problem(dialect, drafter=True, after=0.0) is None
    problem = drafting_problem(dialect, drafter=True, after=None, over="its warm-up")
    assert problem is not None
    assert problem.startswith("exports no ") and " after its warm-up, so this drafter" in problem
    assert missing_counter_hint(dialect) in problem
    assert drafting_problem(dialect, drafter=False, after=None) is None
    problem = drafting_problem(dialect, drafter=False, after=3.0)
    assert problem is not None and "has no drafter but the engine exports" in problem


def test_the_smoke_asks_that_it_moved_and_absent_before_is_zero_only_on_sglang():
    assert drafting_problem("sglang", drafter=True, before=None, after=3.0) is None
    assert drafting_problem("vllm", drafter=True, before=None, after=3.0) is not None
    assert drafting_problem("vllm", drafter=True, before=2.0, after=3.0) is None
    frozen = drafting_problem("vllm", drafter=True, before=2.0, after=2.0, over="2 greedy requests")
    assert (
        frozen == "did not move its vllm:spec_decode_num_drafts_total over 2 greedy"
        " requests (2 -> 2)"
    )


def test_a_dialect_without_a_hint_of_its_own_gets_the_default():
    assert missing_counter_hint("tgi") == DEFAULT_MISSING_COUNTER_HINT  # type: ignore[arg-type]
    assert missing_counter_hint("sglang") != DEFAULT_MISSING_COUNTER_HINT


def test_the_wait_reads_until_the_rule_holds_or_time_is_up():
    reads = iter([(None, None), (None, "/metrics failed: HTTP 500"), (5.0, None)])
    reading = wait_for_drafting(
        lambda: next(reads), "sglang", drafter=True, before=None, wait_s=5.0, poll_s=0.0
    )
    assert (reading.after, reading.error, reading.problem) == (5.0, None, None)
    reading = wait_for_drafting(
        lambda: (None, "/metrics failed: HTTP 500"), "vllm", drafter=True, wait_s=0.0, poll_s=0.0
    )
    assert reading.problem is not None
    assert reading.error == "/metrics failed: HTTP 500" and reading.problem.startswith(
        "exports no vllm:spec_decode_num_drafts_total"
    )
