"""Whole scripted studies, as a user runs them: the three acceptance figures of a cell
agree, and a drafter arm whose engine lacks its speculation counter stops the run at its
start with one line (issue 11, items 2 and 3)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from harness.analysis.acceptance_requests import request_acceptance
from harness.analysis.load import load_run
from harness.testengine import __version__ as SCRIPTED_VERSION
from tests.engines.test_spec_counter import scripted_engines
from tests.run.conftest import ROOT, run_folder, specbench

COUNTER = {"vllm": "vllm:spec_decode_num_drafts_total", "sglang": "sglang:spec_verify_calls_total"}


def speed_study(
    tmp_path: Path, dialect: str, omit: list[str] | None = None, smoke: bool = True
) -> Path:
    """scripted-pass.yaml's two arms in the given dialect, speed cells at 1, 2 and 4 only."""
    data = yaml.safe_load((ROOT / "examples" / "scripted-pass.yaml").read_text())
    data["recording"]["smoke"] = smoke
    for arm in data["arms"]:
        arm["scripted"] = {**arm["scripted"], "metrics_dialect": dialect}
    if omit:
        data["arms"][1]["scripted"]["omit_series"] = omit
    data["loads"]["closed_loop"]["concurrency"] = [1, 2, 4]
    del data["loads"]["open_loop"]
    data["tasks"] = [
        {"name": "chat", "kind": "chat", "uses": ["speed"], "max_tokens": 32, "subset": 16}
    ]
    data["bars"] = {
        "pass": {"speed": {"concurrencies": [1, 2, 4]}, "identity": None},
        "stop": {"concurrencies": [1, 2, 4]},
        "intervals": {"bootstrap_resamples": 200},
    }
    path = tmp_path / f"accept-{dialect}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_the_three_acceptance_figures_agree_on_a_scripted_study(tmp_path, results, dialect):
    # Without the smoke stage, which no figure here reads: one engine start less.
    specbench(
        "run",
        str(speed_study(tmp_path, dialect, smoke=False)),
        "--results",
        str(results),
        "--no-report",
    )
    run = run_folder(results)
    cells = pd.read_csv(run / "cells.csv")
    loaded = load_run(run)
    drafter = cells[(cells["arm"] == "drafter") & (cells["status"] == "complete")]
    assert len(drafter) >= 2, cells[["cell_id", "status", "reason"]]
    for row in drafter.itertuples():
        engine = row.accept_length_per_round_engine
        requests = row.accept_length_per_round_requests
        client = row.tokens_per_step_client
        assert row.spec_requests == row.n_ok > 0  # every measured request carried figures
        assert row.acceptance_agree, (row.cell_id, row.acceptance_disagreement)
        assert pd.isna(row.acceptance_disagreement)
        # The counters counted the warm-up requests too: over those same requests the
        # engine's per-request figures sum to what its counters say.
        cell = loaded.cells[row.cell_id]
        window = request_acceptance(cell.warmup + cell.requests, ("warmup", "measure"))
        assert window is not None
        assert len(cell.warmup) >= 1 and window.requests == len(cell.warmup) + row.n_ok
        assert engine == pytest.approx(window.accept_length_per_round, rel=0.01)
        assert 2.5 < requests < 4.5  # the declared acceptance: 1 + 0.9 + ... ~ 3.7
        if dialect == "vllm":
            # One chunk per verification step: the client counts exactly the rounds.
            assert client == pytest.approx(requests, rel=1e-9)
        else:
            # SGLang's count holds each request's prefill token; the client's does not.
            assert requests - 0.5 < client < requests
    base = cells[cells["arm"] == "base"]
    assert (base["spec_requests"] == 0).all() and base["acceptance_agree"].isna().all()


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_a_run_stops_at_a_drafter_arm_without_its_counter(tmp_path, results, dialect):
    metric = COUNTER[dialect]
    study = speed_study(tmp_path, dialect, omit=[metric])
    proc = specbench("run", str(study), "--results", str(results), "--no-report", check=False)
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("specbench: ")]
    # The smoke stage starts every arm before the first registered cell: the drafter's
    # start fails there, with the start's own line, and no registered cell is measured.
    assert len(errors) == 2, proc.stderr[-3000:]
    assert errors[0].startswith("specbench: smoke: arm 'drafter': did not start: ")
    assert (
        f"arm 'drafter': scripted {SCRIPTED_VERSION} exports no {metric} after its"
        " warm-up" in errors[0]
    )
    assert errors[1].startswith("specbench: the run stopped before its first registered cell")
    assert "Traceback" not in proc.stderr
    run = run_folder(results)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "smoke_failed"
    # Recorded from its spawn, then as a failed start; never as ready.
    assert [e["state"] for e in manifest["engines"].get("drafter", [])] in ([], ["failed to start"])
    assert not list((run / "cells").glob("*/complete.json"))
    smoke = [json.loads(line) for line in (run / "smoke" / "arms.jsonl").read_text().splitlines()]
    failed = [r for r in smoke if r["status"] == "failed"]
    assert [(r["arm"], r["failed_check"]) for r in failed] == [("drafter", "start")]
    assert metric in failed[0]["reason"]
    assert not scripted_engines()  # no engine outlives the failed start
