"""A closed-loop cell whose users turn around slowly is invalid and measured again, and
the cell table shows the load each cell delivered beside its registered users."""

from __future__ import annotations

import dataclasses
import io

from rich.console import Console

from harness.analysis.tables import analyse
from harness.prereg import load_study_file
from harness.run import execute
from harness.run.progress import RunProgress
from harness.run.runner import Runner, new_run
from harness.run.session import executed_study
from tests.measure.test_delivered import SlowTurnaroundLoop
from tests.run.conftest import ROOT

CELL = "base/chat/speed/c002"


def test_a_slow_turnaround_is_invalid_and_the_cell_is_measured_again(tmp_path, monkeypatch):
    loaded = load_study_file(ROOT / "examples" / "scripted-pass.yaml")
    # Generous limits for the second attempt; the first one's injected 0.5 s between
    # requests of ~0.35 s passes both by far on any machine.
    recording = loaded.study.recording.model_copy(
        update={"lag_limit_p99_ms": 200.0, "min_delivered_share": 0.8, "cell_retries": 1}
    )
    study = executed_study(loaded.study).model_copy(update={"recording": recording})
    store = new_run(loaded, tmp_path / "results")
    console = Console(file=io.StringIO())
    runner = Runner(store, study, console)
    cell = next(c for c in runner.cells if c.id == CELL)

    real = execute.cell_pattern
    patterns: list[str] = []

    def slowed_once(study, cell, rate_rps=None):
        pattern = real(study, cell, rate_rps)
        patterns.append(type(pattern).__name__)
        if len(patterns) == 1:
            return SlowTurnaroundLoop(**dataclasses.asdict(pattern))
        return pattern

    monkeypatch.setattr(execute, "cell_pattern", slowed_once)
    try:
        with RunProgress(console, 100) as progress:
            runner._run_cells([cell], progress)
    finally:
        runner.close_engine()

    assert patterns == ["ClosedLoop", "ClosedLoop"]  # measured twice
    attempts = store.cell_info(CELL)["attempts"]
    assert [a["status"] for a in attempts] == ["invalid", "complete"]
    assert "user turnaround p99" in attempts[0]["error"]
    assert "delivered concurrency" in attempts[0]["error"]
    done = store.completion(CELL)
    assert done is not None and done.attempt == 2

    row = analyse(store.root, study).cells.set_index("cell_id").loc[CELL]
    assert row["concurrency"] == 2 and row["attempt"] == 2
    assert row["delivered_concurrency"] > 0 and row["delivered_share"] > 0
    assert row["turnaround_p99_ms"] >= 0
