"""Identity judged token by token with the engine's own logprobs (issue 29): a divergence
at a near-tie of the target's is numerics, one where it clearly preferred its token is
real. Scripted engines serve logprobs and diverge at a chosen token with a chosen margin."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from harness.analysis.bars import identity_bar
from harness.analysis.tables import analyse
from harness.prereg import load_study_file
from tests.run.conftest import pdf_text, run_folder, specbench, verdict_of
from tests.run.test_remeasure import said, study_file
from tests.run.test_smoke import specbench_errors

BEYOND = {"count": "beyond_near_ties", "near_tie_margin": 0.5}


def smoke_lines(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "smoke" / "arms.jsonl").read_text().splitlines()]


def identity_under(run: Path, study_path: Path, count: str):
    """The identity bar of the run's own cells under another registered reading."""
    data = yaml.safe_load(study_path.read_text())
    data["bars"]["pass"]["identity"] = {**BEYOND, "count": count}
    other = study_path.with_name(f"study-{count}.yaml")
    other.write_text(yaml.safe_dump(data, sort_keys=False))
    return identity_bar(analyse(run, load_study_file(other).study))


def test_a_near_tie_divergence_passes_beyond_near_ties_fails_exact_and_the_smoke_goes_on(tmp_path):
    # The target's top two at output token 3 are 0.01 nats apart on both arms' engines;
    # the drafter arm's kernels rank them the other way there.
    study = study_file(
        tmp_path,
        base={"tie_at_token": 3},
        identity=BEYOND,
        drafter={"tie_at_token": 3, "flip_at_token": 3},
        recording={"smoke": True},
    )
    results = tmp_path / "results"
    proc = specbench(
        "run", str(study), "--results", str(results), "--reports", str(tmp_path / "reports")
    )
    run = run_folder(results)
    # The smoke recorded the near-tie on both prompts and went on.
    (check,) = [r for r in smoke_lines(run) if r["kind"] == "identity"]
    assert check["status"] == "passed" and check["compared"] == 2
    assert [(t["token_index"], t["kind"]) for t in check["near_ties"]] == [(2, "numeric")] * 2
    assert all(
        abs(t["drafter_margin"] - 0.01) < 1e-6 and abs(t["baseline_margin"] - 0.01) < 1e-6
        for t in check["near_ties"]
    )
    assert "diverges at a near-tie of the target's on 2" in said(proc)

    verdict = verdict_of(run)
    bar = next(b for b in verdict["bars"] if b["name"] == "pass.identity")
    assert bar["status"] == "pass", bar
    arm = bar["evidence"]["tasks"]["chat"]["arms"]["drafter"]
    assert (arm["n_identical"], arm["n_numeric"], arm["n_counted_identical"], arm["share"]) == (
        0,
        6,
        6,
        1.0,
    )
    assert arm["divergence_kinds"] == {"numeric": 6, "real": 0, "unknown": 0}
    first = arm["mismatches"][0]["divergence"]
    assert (first["token_index"], first["kind"]) == (2, "numeric")
    assert first["drafter_token"] != first["baseline_token"]

    # The same cells read exactly: every output differs, so the bar fails.
    exact = identity_under(run, study, "exact")
    assert exact.status == "fail"
    detail = exact.evidence["tasks"]["chat"]["arms"]["drafter"]
    assert (detail["share"], detail["n_numeric"]) == (0.0, 6)

    # The report's identity page lists every divergence, with both margins and its kind.
    pdf = tmp_path / "reports" / f"{run.name}.pdf"
    text = " ".join(pdf_text(pdf).split())
    # Six on the identity page (every one), five more in the verdict's evidence.
    assert text.count("first divergent token: #2 drafter") == 11, text[-3000:]
    assert "(margin 0.01) vs baseline" in text and "NUMERIC (the target's top two" in text


def test_a_real_divergence_stops_the_smoke_and_fails_both_readings(tmp_path):
    # The drafter arm keeps, at output token 3, the token its target ranked second by 5
    # nats: a verification bug, not numerics.
    study = study_file(
        tmp_path, identity=BEYOND, drafter={"flip_at_token": 3}, recording={"smoke": True}
    )
    proc = specbench(
        "run", str(study), "--results", str(tmp_path / "results"), "--no-report", check=False
    )
    assert proc.returncode == 1, said(proc)[-3000:]
    first = specbench_errors(proc)[0]
    assert "its greedy output differs from its baseline 'base' on item" in first, first
    assert (
        "at token 2 " in first
        and "(the target's margin 5 drafter, 5 baseline; a near-tie is below 0.5)" in first
        and "-- real: " in first
    ), first
    assert not (run_folder(tmp_path / "results") / "cells").exists()

    # Measured without the smoke, its identity cells fail under either reading.
    study = study_file(tmp_path, identity=BEYOND, drafter={"flip_at_token": 3})
    results = tmp_path / "results2"
    specbench("run", str(study), "--results", str(results), "--no-report")
    run = run_folder(results)
    beyond = identity_under(run, study, "beyond_near_ties")
    exact = identity_under(run, study, "exact")
    assert beyond.status == exact.status == "fail"
    arm = beyond.evidence["tasks"]["chat"]["arms"]["drafter"]
    assert arm["divergence_kinds"] == {"numeric": 0, "real": 6, "unknown": 0} and arm["share"] == 0
    d = arm["mismatches"][0]["divergence"]
    assert (d["token_index"], d["kind"]) == (2, "real")
    assert abs(d["drafter_margin"] - 5.0) < 1e-6 and abs(d["baseline_margin"] - 5.0) < 1e-6
