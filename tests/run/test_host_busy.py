"""A cell another program disturbed is measured again: one scripted-engine cell, in this
process, whose first attempt runs beside processes spinning on half the host's CPUs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from harness.plan import plan_cells
from harness.prereg import load_study_file
from harness.run.attempts import measure_cell
from harness.run.progress import RunProgress
from harness.run.runner import new_run
from harness.rundir import cell_dirname
from harness.testengine.server import serve_in_thread
from tests.run.test_remeasure import study_file

LIMIT = 0.25  # half the CPUs spinning is ~0.5; a quiet host well under 0.1


def spin_outside_this_tree(cpu: int) -> int:
    """A process spinning on `cpu` whose parent exits at once, so it is no descendant of
    the harness (this process): other CPU, as another program's would be. Its pid."""
    code = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"
    out = subprocess.run(
        ["sh", "-c", '"$0" -c "$1" </dev/null >/dev/null 2>&1 & echo $!', sys.executable, code],
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    )
    return int(out.stdout)


class Progress:
    """What measure_cell tells the runner's progress (a stand-in for RunProgress,
    passed as one); the spinners stop when the first attempt ends."""

    def __init__(self, spinners: list[int]) -> None:
        self.spinners = spinners
        self.ends: list[tuple[str, str]] = []

    def stop_spinners(self) -> None:
        while self.spinners:
            try:
                os.kill(self.spinners.pop(), signal.SIGKILL)
            except ProcessLookupError:
                pass

    def end_cell(self, cell, status: str, detail: str) -> None:
        self.ends.append((status, detail))
        self.stop_spinners()

    def start_cell(self, cell, attempt: int) -> None: ...
    def on_record(self, rec) -> None: ...
    def on_sample(self, sample) -> None: ...
    def note(self, text: str) -> None: ...


@contextmanager
def scripted_arm(arm):
    """The runner's ArmEngine for `arm`, around a scripted engine in this process's thread:
    its CPU is the harness's own; with no process of its own it is counted as attached."""
    with serve_in_thread(arm.scripted) as served:
        process = SimpleNamespace(
            base_url=served.base_url,
            metrics_url=served.base_url + "/metrics",
            served_model="scripted",
            metrics_dialect="vllm",
            pgid=None,
            alive=lambda: True,
        )
        yield SimpleNamespace(arm=arm, gpus=None, ensure=lambda started_for: process)


@pytest.mark.timing
def test_a_cell_run_beside_a_spinning_process_is_measured_again_and_the_quiet_one_kept(
    tmp_path: Path,
):
    path = study_file(tmp_path, recording={"host_foreign_cpu_limit": LIMIT, "cell_retries": 1})
    loaded = load_study_file(path)
    store = new_run(loaded, tmp_path / "results")
    cell = next(c for c in plan_cells(loaded.study) if c.id == "base/chat/speed/c001")
    arm = next(a for a in loaded.study.arms if a.name == "base")
    cpus = sorted(os.sched_getaffinity(0))
    progress = Progress([spin_outside_this_tree(cpu) for cpu in cpus[: max(1, len(cpus) // 2)]])
    try:
        with scripted_arm(arm) as engine:
            usable = measure_cell(store, loaded.study, engine, cell, cast(RunProgress, progress))
    finally:
        progress.stop_spinners()
    folder = store.cell_dir(cell.id)
    assert folder.name == cell_dirname(cell.id)
    attempts = json.loads((folder / "cell.json").read_text())["attempts"]
    assert [a["status"] for a in attempts] == ["invalid", "complete"], attempts
    busy = attempts[0]["error"]
    assert busy.startswith("host busy: ") and busy.endswith(
        f"above the limit {LIMIT:g}; the engine is attached, so its own CPU, if on this"
        " host, counts as other"
    ), busy
    assert float(busy.split()[2]) > LIMIT
    assert [status for status, _ in progress.ends] == ["REMEASURE", "done"]
    assert usable
    health = json.loads((folder / "complete.json").read_text())["outcome"]["health"]
    assert health["host_foreign_cpu_limit"] == LIMIT
    assert health["host_engine_counted"] is False
    assert 0 <= health["host_foreign_cpu_share"] + health["host_steal_share"] <= LIMIT, health


def test_every_cell_records_the_shares_even_with_no_limit_registered(tmp_path: Path):
    path = study_file(tmp_path)
    loaded = load_study_file(path)
    assert loaded.study.recording.host_foreign_cpu_limit is None
    store = new_run(loaded, tmp_path / "results")
    cell = next(c for c in plan_cells(loaded.study) if c.id == "base/chat/identity")
    arm = next(a for a in loaded.study.arms if a.name == "base")
    with scripted_arm(arm) as engine:
        assert measure_cell(store, loaded.study, engine, cell, cast(RunProgress, Progress([])))
    health = json.loads((store.cell_dir(cell.id) / "complete.json").read_text())["outcome"][
        "health"
    ]
    assert health["host_foreign_cpu_limit"] is None
    assert 0 <= health["host_foreign_cpu_share"] <= 1 and 0 <= health["host_steal_share"] <= 1
