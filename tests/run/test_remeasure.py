"""Whole scripted studies: a cell that measured nothing usable is measured again.

Every outcome here is set by the scripted engine's declared failures (by arrival
number, over an engine process's life) and chunking, never by timing: the client lag
limit is raised far above anything a loaded machine shows, so no cell is remeasured
for lag, and each cell's attempts are exactly the ones the script causes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from harness.rundir import cell_dirname
from tests.run.conftest import ROOT, copy_of_run, run_folder, specbench, verdict_of

SPEED = [f"{arm}/chat/speed/c{c:03d}" for arm in ("base", "drafter") for c in (1, 2, 4)]


def study_file(
    tmp_path: Path,
    *,
    base: dict | None = None,
    drafter: dict | None = None,
    recording: dict | None = None,
    chat: dict | None = None,
    identity: dict | None = None,
    accuracy: dict | None = None,
) -> Path:
    """examples/scripted-pass.yaml at levels 1-4, no open loop, knee not required (so
    only speed, identity and accuracy decide), with per-arm scripted-engine changes."""
    data = yaml.safe_load((ROOT / "examples" / "scripted-pass.yaml").read_text())
    data["loads"]["closed_loop"]["concurrency"] = [1, 2, 4]
    del data["loads"]["open_loop"]
    data["bars"]["pass"]["knee"] = {"required": False}
    if identity:
        data["bars"]["pass"]["identity"] = identity
    if accuracy:
        data["bars"]["pass"]["accuracy"].update(accuracy)
    # No cell is remeasured for client lag here, whatever the machine's load. The smoke
    # stage is off: its prompts would take arrivals 2 and 3 of the first arm's engine,
    # which it keeps for the first cell, and the refusals below count arrivals from there.
    data["recording"] = {
        **data["recording"],
        "lag_limit_p99_ms": 10_000,
        "smoke": False,
        **(recording or {}),
    }
    arms = {a["name"]: a for a in data["arms"]}
    arms["base"]["scripted"].update(base or {})
    arms["drafter"]["scripted"].update(drafter or {})
    data["tasks"][0].update(chat or {})
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def refuse(*arrivals: int) -> dict:
    """Refuse these arrivals of each engine process; arrival 1 is the engine's own
    start-up warm-up request, so the first request of a cell is arrival 2."""
    return {"failures": [{"mode": "refuse", "requests": list(arrivals)}]}


def cell_json(run: Path, cell: str) -> dict:
    return json.loads((run / "cells" / cell_dirname(cell) / "cell.json").read_text())


def marker(run: Path, cell: str) -> dict:
    return json.loads((run / "cells" / cell_dirname(cell) / "complete.json").read_text())


def statuses(run: Path, cell: str) -> list[str]:
    return [a["status"] for a in cell_json(run, cell)["attempts"]]


def bars(verdict: dict) -> dict[str, str]:
    return {b["name"]: b["status"] for b in verdict["bars"]}


def said(proc) -> str:
    """What the run printed, with rich's line wrapping undone."""
    return re.sub(r"\s+", " ", proc.stdout + proc.stderr)


@pytest.fixture(scope="module")
def early_refusal_run(tmp_path_factory) -> Path:
    """One run whose drafter engine refuses its third request: item 2 of
    drafter/chat/identity, a 32-request cell (1/32 = 3 % < the 5 % limit). The study
    allows 1 mismatch in 32 so that the pinned verdict does not hang on how a request
    with no output is counted. A folder holding study.yaml and results/; the resume
    test works on a copy of it (its base arm is the plain one)."""
    folder = tmp_path_factory.mktemp("early-refusal")
    study = study_file(
        folder,
        drafter=refuse(3),
        chat={"subset": 32, "identity_items": 32},
        identity={"min_identical_share": 0.95},
    )
    specbench("run", str(study), "--results", str(folder / "results"), "--no-report")
    return folder


def test_one_early_refusal_in_a_32_request_cell_neither_aborts_it_nor_leaves_a_bar_incomplete(
    early_refusal_run,
):
    # Before, 1 error in the first 10 requests aborted the cell and left the identity bar
    # INCOMPLETE.
    run = run_folder(early_refusal_run / "results")
    verdict = verdict_of(run)
    assert verdict["verdict"] == "PASS", json.dumps(verdict, indent=1)[:3000]
    assert "incomplete" not in bars(verdict).values() and verdict["excluded_cells"] == []
    cell = "drafter/chat/identity"
    assert statuses(run, cell) == ["complete"]  # measured once, not aborted, not remeasured
    outcome = marker(run, cell)["outcome"]
    assert (outcome["aborted"], outcome["n_ok"], outcome["n_errors"]) == (False, 31, 1)
    assert outcome["errors_by_kind"] == {"http": 1}
    identity = next(b for b in verdict["bars"] if b["name"] == "pass.identity")
    arm = identity["evidence"]["tasks"]["chat"]["arms"]["drafter"]
    # The refused item is not compared (a failed request has no text to compare); the
    # other 31 are, and are identical.
    assert arm["drafter_cell"] == cell and (arm["n_compared"], arm["n_identical"]) == (31, 31)
    records = [
        json.loads(line)
        for line in (run / "cells" / cell_dirname(cell) / "requests.jsonl").read_text().splitlines()
    ]
    refused = [r["item_id"] for r in records if r["phase"] == "measure" and r["error"]]
    assert [n["item_id"] for n in arm["not_compared"]] == refused and len(refused) == 1


def test_an_aborted_cell_is_measured_again_and_the_new_attempt_is_used(results, tmp_path):
    # The base engine refuses the first three requests of base/chat/identity (one user):
    # it aborts at 3/3 errors; its second attempt gets no refusal.
    study = study_file(tmp_path, base=refuse(2, 3, 4))
    proc = specbench("run", str(study), "--results", str(results), "--no-report")
    run = run_folder(results)
    cell = "base/chat/identity"
    info = cell_json(run, cell)
    assert statuses(run, cell) == ["invalid", "complete"], info["attempts"]
    assert info["attempts"][0]["error"].startswith(
        "aborted: error rate 3/3 measured requests = 100.0% passed the limit 5.0%"
    )
    assert marker(run, cell)["attempt"] == 2
    assert marker(run, cell)["outcome"]["n_errors"] == 0
    # Every attempt's records are kept; analysis reads the one complete.json names.
    lines = (run / "cells" / cell_dirname(cell) / "requests.jsonl").read_text().splitlines()
    by_attempt = [json.loads(ln)["attempt"] for ln in lines]
    assert by_attempt.count(2) == 6 and 3 <= by_attempt.count(1) <= 4
    verdict = verdict_of(run)
    assert verdict["verdict"] == "PASS", json.dumps(verdict, indent=1)[:3000]
    assert verdict["excluded_cells"] == []
    identity = next(b for b in verdict["bars"] if b["name"] == "pass.identity")
    arm = identity["evidence"]["tasks"]["chat"]["arms"]["drafter"]
    assert arm["baseline_cell"] == cell and arm["n_identical"] == arm["n_compared"] == 6
    text = said(proc)
    assert "REMEASURE base/chat/identity" in text
    assert (
        "unusable: aborted: error rate 3/3" in text and "(1 of at most 3 measurements used)" in text
    )
    # Stage 2 starts a fresh base engine, which refuses the first three requests of
    # base/gsm8k/accuracy (four users, no warm-up): aborted too, and measured again.
    accuracy = "base/gsm8k/accuracy"
    info = cell_json(run, accuracy)
    assert statuses(run, accuracy) == ["invalid", "complete"], info["attempts"]
    assert info["attempts"][0]["error"].startswith("aborted: error rate 3/")
    assert marker(run, accuracy)["attempt"] == 2


def test_a_cell_without_a_per_user_speed_is_remeasured_then_stays_invalid(results, tmp_path):
    # The base engine sends each output in one write as the request ends: first token
    # and end share a stamp, so every request is a burst with no TPOT, attempt after
    # attempt.
    # Identity and accuracy judge every drafter, so they need no speedup to pick one.
    study = study_file(
        tmp_path,
        base={"chunking": "per_request"},
        recording={"cell_retries": 1},
        identity={"arms": "all_drafters"},
        accuracy={"arms": "all_drafters"},
    )
    proc = specbench("run", str(study), "--results", str(results), "--no-report", check=False)
    assert proc.returncode == 3, said(proc)[-3000:]  # INCOMPLETE: not a complete answer's 0
    run = run_folder(results)
    base_speed = [c for c in SPEED if c.startswith("base/")]
    for cell in base_speed:
        info = cell_json(run, cell)
        assert statuses(run, cell) == ["invalid", "invalid"], info["attempts"]
        # Judged by the burst rule first (every request is one burst), so no attempt
        # gets as far as "no request with a per-user speed".
        assert all("8/8 requests arrived in bursts" in a["error"] for a in info["attempts"])
        assert marker(run, cell)["attempt"] == 2  # the last measurement is the one kept
    for cell in ("drafter/chat/speed/c001", "base/chat/identity", "base/gsm8k/accuracy"):
        assert statuses(run, cell) == ["complete"], cell  # outputs and scores still count
    verdict = verdict_of(run)
    assert verdict["verdict"] == "INCOMPLETE", json.dumps(verdict, indent=1)[:3000]
    excluded = {e["cell"]: e["reason"] for e in verdict["excluded_cells"]}
    assert set(excluded) == set(base_speed)
    assert all("arrived in bursts" in r for r in excluded.values())
    assert bars(verdict)["pass.speed"] == "incomplete"
    assert bars(verdict)["pass.identity"] == bars(verdict)["pass.accuracy"] == "pass"
    text = said(proc)
    assert "REMEASURE base/chat/speed/c001" in text and "INVALID base/chat/speed/c001" in text
    assert "all 2 measurements spent, so no bar uses it" in text

    # A resume finds them unusable with no attempts left: nothing is measured again.
    before = {
        c: (run / "cells" / cell_dirname(c) / "requests.jsonl").stat().st_size for c in base_speed
    }
    again = specbench(
        "run", str(study), "--results", str(results), "--resume", "--no-report", check=False
    )
    assert again.returncode == 3 and "base/chat/speed/c001 stays invalid" in said(again)
    # The verdict says why and how to go on: bursts are a cause that may pass (a client
    # that fell behind), so the command it names measures them again with a fresh budget.
    assert (
        "bursts, 3 cells (pass.speed 3): 1.00 of the requests arrived in bursts, above"
        " the limit 0.1" in said(again)
    ), said(again)[-3000:]
    assert f"to finish the run: specbench run {study} --resume {run} --remeasure-invalid" in said(
        again
    )
    for cell in base_speed:
        assert statuses(run, cell) == ["invalid", "invalid"]
        assert (run / "cells" / cell_dirname(cell) / "requests.jsonl").stat().st_size == before[
            cell
        ]
    assert verdict_of(run)["verdict"] == "INCOMPLETE"


def test_resume_remeasures_a_complete_but_unusable_cell_while_attempts_remain(
    early_refusal_run, tmp_path
):
    study, results = copy_of_run(early_refusal_run, "study.yaml", tmp_path)
    run = run_folder(results)
    assert verdict_of(run)["verdict"] == "PASS"
    # Make base/chat/speed/c001 what the demo run left before this was fixed: a complete
    # cell whose every request had all its tokens in one read (no per-user speed).
    cell = "base/chat/speed/c001"
    path = run / "cells" / cell_dirname(cell) / "requests.jsonl"
    records = [json.loads(ln) for ln in path.read_text().splitlines()]
    for rec in records:
        rec["first_token_t"] = rec["end_t"]
        rec["chunk_times"] = [rec["end_t"]]
        rec["chunk_tokens"] = [rec["completion_tokens"]]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert verdict_of(run)["verdict"] == "PASS"  # the verdict on disk is the old one
    specbench("analyse", str(run))
    stale = verdict_of(run)
    assert stale["verdict"] == "INCOMPLETE"
    assert [e["cell"] for e in stale["excluded_cells"]] == [cell]
    others = {c: marker(run, c) for c in SPEED if c != cell}

    proc = specbench("run", str(study), "--results", str(results), "--resume", "--no-report")
    text = said(proc)
    assert f"remeasuring {cell}: attempt 1 is unusable: no request with a per-user speed" in text, (
        text[-3000:]
    )
    assert "(1 of at most 3 measurements used)" in text
    info = cell_json(run, cell)
    assert statuses(run, cell) == ["invalid", "complete"], info["attempts"]
    assert marker(run, cell)["attempt"] == 2
    assert {c: marker(run, c) for c in others} == others  # nothing else measured again
    verdict = verdict_of(run)
    assert verdict["verdict"] == "PASS", json.dumps(verdict, indent=1)[:3000]
    assert verdict["excluded_cells"] == []
