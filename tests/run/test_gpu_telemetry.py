"""Whole scripted studies with GPU telemetry from the fake NVML binding (tests/fake_nvml),
which the harness imports as `pynvml` from the PYTHONPATH the runner gets.

The fake reports a throttled GPU on the first two clock-event reads of the run: those
are the first and second samples of the first cell measured, base/chat/speed/c001 (the
sampler reads at a cell's start, then each second, then once as it ends), so which cell
throttled is fixed by the plan order, not by timing.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
from pathlib import Path

import pandas as pd
import yaml
from rich.console import Console

from harness.plan import plan_cells
from harness.prereg import load_study
from harness.records import GpuReading, GpuSample, RequestRecord
from harness.run.attempts import needs_measuring
from harness.run.progress import RunProgress
from harness.run.store import JsonlWriter, RunStore
from harness.rundir import Outcome, cell_dirname
from tests.run.conftest import ROOT, pdf_text, run_folder, specbench, verdict_of

FAKE_DIR = ROOT / "tests" / "fake_nvml"
FIRST = "base/chat/speed/c001"  # the first cell of the plan below
IDLE, POWER_CAP = 0x1, 0x4
THROTTLED_START = {
    "clock_event_bits": IDLE,
    "events": [{"gpu": 0, "calls": [1, 2], "bits": POWER_CAP | IDLE}],
}


def study(tmp_path: Path, gpu_throttle: str) -> Path:
    """examples/scripted-pass.yaml at levels 1-4, without identity, open loop or knee: six
    speed cells, then two accuracy cells."""
    data = yaml.safe_load((ROOT / "examples" / "scripted-pass.yaml").read_text())
    data["loads"]["closed_loop"]["concurrency"] = [1, 2, 4]
    del data["loads"]["open_loop"]
    data["tasks"][0]["uses"] = ["speed"]
    data["bars"]["pass"]["identity"] = None
    data["bars"]["pass"]["knee"] = {"required": False}
    # The speed bar at one and two users, where the scripted drafter's ~3x stands far from
    # the 2x bar whatever this machine's load: at four users the scripted engine is
    # CPU-bound on 2 cores and its speedup moves with the load. So the verdict is PASS.
    data["bars"]["pass"]["speed"] = {"threshold": 2.0, "concurrencies": [1, 2]}
    # No cell is remeasured for client lag here, whatever the machine's load. The smoke
    # stage is off (it samples no GPU, and no test here reads it): one engine start less.
    data["recording"] = {
        **data["recording"],
        "lag_limit_p99_ms": 10_000,
        "gpu_throttle": gpu_throttle,
        "smoke": False,
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_with_fake(
    tmp_path: Path,
    results: Path,
    scenario: dict,
    gpu_throttle: str = "flag",
    report: bool = False,
    cuda_visible: str = "0",
) -> subprocess.CompletedProcess:
    env = {
        "PYTHONPATH": os.pathsep.join([str(FAKE_DIR), str(ROOT)]),
        "FAKE_NVML": json.dumps(scenario),
        "CUDA_VISIBLE_DEVICES": cuda_visible,
    }
    args = ["run", str(study(tmp_path, gpu_throttle)), "--results", str(results)]
    args += ["--reports", str(tmp_path / "reports")] if report else ["--no-report"]
    return specbench(*args, env=env)


def said(proc: subprocess.CompletedProcess) -> str:
    return re.sub(r"\s+", " ", proc.stdout + proc.stderr)


def gpu_samples(run: Path, cell: str) -> list[GpuSample]:
    path = run / "cells" / cell_dirname(cell) / "gpu.jsonl"
    return [GpuSample.model_validate_json(line) for line in path.read_text().splitlines()]


def cell_json(run: Path, cell: str) -> dict:
    return json.loads((run / "cells" / cell_dirname(cell) / "cell.json").read_text())


def test_telemetry_is_recorded_per_cell_and_a_throttled_cell_is_flagged(results, tmp_path):
    scenario = {
        **THROTTLED_START,
        "errors": [{"gpu": 0, "function": "nvmlDeviceGetTemperature", "calls": [6], "code": 15}],
    }
    # The engines are told of GPUs 0 and 3; the host has one: GPU 3 is missing, not an error.
    proc = run_with_fake(tmp_path, results, scenario, report=True, cuda_visible="0,3")
    run = run_folder(results)
    manifest = json.loads((run / "manifest.json").read_text())
    telemetry = manifest["gpu_telemetry"]
    assert telemetry["recorded"] is True and telemetry["driver_version"] == "550.54.15 (fake)"
    assert [g["name"] for g in telemetry["gpus"]] == ["NVIDIA H100 PCIe"]
    missing = "GPU 3: not found (NVML sees 1 GPU(s))"
    for starts in manifest["engines"].values():
        entry = starts[-1]["gpu_telemetry"]
        assert entry["selected_by"] == "the harness's CUDA_VISIBLE_DEVICES=0,3"
        assert entry["missing"] == [missing] and [g["index"] for g in entry["gpus"]] == [0]
    assert f"GPU telemetry without {missing}" in said(proc)

    cells = pd.read_csv(run / "cells.csv").set_index("cell_id")
    assert len(cells) == 8 and (cells["status"] == "complete").all(), cells["status"]
    lost = []
    for cell in cells.index:
        samples = gpu_samples(run, cell)
        assert len(samples) >= 2 and samples[-1].final, cell
        assert all(s.attempt == 1 and s.cell_id == cell for s in samples)
        readings = [r for s in samples for r in s.gpus]
        lost += [(cell, r.error) for r in readings if not r.ok]
        good = [r for r in readings if r.ok]
        assert good and all(r.sm_clock_mhz == 1755 and r.power_limit_w == 350.0 for r in good)
        throttled = [s for s in samples if any("sw_power_cap" in r.clock_events for r in s.gpus)]
        assert len(throttled) == (2 if cell == FIRST else 0), cell
        assert cells.loc[cell, "gpu_samples"] == sum(1 for s in samples if s.ok)
    # The GPU fell off the bus for one reading: a gap in one cell, which stays usable.
    assert [e for _, e in lost] == ["temperature_c: GPU is lost"]

    # Flagged in the cell table: the first cell only, by the power cap; idle never counts.
    flagged = cells[cells["gpu_throttled"]]
    assert list(flagged.index) == [FIRST]
    assert flagged.loc[FIRST, "gpu_throttle_reasons"] == "sw_power_cap"
    assert flagged.loc[FIRST, "gpu_throttled_samples"] == 2
    # ... only flagged: measured once and used by the bars.
    assert [a["status"] for a in cell_json(run, FIRST)["attempts"]] == ["complete"]

    # Every cell used, the throttled one flagged beside its figure: the verdict stands.
    verdict = verdict_of(run)
    assert verdict["excluded_cells"] == [] and verdict["verdict"] == "PASS", verdict["reasons"]
    assert verdict["gpu_throttle_policy"] == "flag"
    assert [
        (c["cell"], c["reasons"], c["throttled_samples"]) for c in verdict["gpu_throttled_cells"]
    ] == [(FIRST, ["sw_power_cap"], 2)]
    speed = next(b for b in verdict["bars"] if b["name"] == "pass.speed")
    figures = {f["concurrency"]: f for f in speed["evidence"]["tasks"]["chat"]["figures"]}
    assert {c: f["gpu_throttled"] for c, f in figures.items()} == {1: [FIRST], 2: []}
    assert figures[1]["baseline_cell"] == FIRST and figures[1]["speedup"] > 1  # still used
    assert f"chat: measured while the GPU throttled: {FIRST}" in speed["summary"]

    text = re.sub(r"\s+", " ", pdf_text(tmp_path / "reports" / f"{run.name}.pdf"))
    assert "GPU telemetry across the run" in text and "GPU telemetry per cell" in text
    assert f"{FIRST} complete" in text and "YES: sw_power_cap (2)" in text
    assert "Cells measured while the GPU throttled (recording.gpu_throttle: flag" in text
    assert "GPU THROTTLED: base/chat/speed/c001" in text  # the bar evidence page


def test_under_remeasure_a_throttled_cell_is_measured_again(results, tmp_path):
    proc = run_with_fake(tmp_path, results, THROTTLED_START, gpu_throttle="remeasure")
    run = run_folder(results)
    attempts = cell_json(run, FIRST)["attempts"]
    assert [a["status"] for a in attempts] == ["invalid", "complete"], attempts
    assert re.fullmatch(
        r"GPU throttled: sw_power_cap in 2 of \d+ samples \(GPU 0\)", attempts[0]["error"]
    ), attempts[0]["error"]
    assert "unusable: GPU throttled: sw_power_cap" in said(proc)
    samples = gpu_samples(run, FIRST)
    assert {s.attempt for s in samples} == {1, 2}  # both attempts' telemetry kept
    assert not any(
        "sw_power_cap" in r.clock_events for s in samples if s.attempt == 2 for r in s.gpus
    )
    cells = pd.read_csv(run / "cells.csv").set_index("cell_id")
    assert cells.loc[FIRST, "attempt"] == 2 and not cells.loc[FIRST, "gpu_throttled"]
    assert (cells["status"] == "complete").all()
    for cell in cells.index.drop(FIRST):  # no other cell throttled, none remeasured
        assert [a["status"] for a in cell_json(run, cell)["attempts"]] == ["complete"], cell
    verdict = verdict_of(run)
    assert verdict["verdict"] == "PASS", verdict["reasons"]
    assert verdict["gpu_throttle_policy"] == "remeasure"
    assert verdict["gpu_throttled_cells"] == [] and verdict["excluded_cells"] == []


def test_a_host_without_nvml_records_no_gpu_telemetry_once_and_runs_cleanly(results, tmp_path):
    proc = run_with_fake(tmp_path, results, {"init_error": 12}, report=True)
    run = run_folder(results)
    reason = "no GPU telemetry: NVML did not start (NVML Shared Library Not Found)"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["gpu_telemetry"] == {
        "recorded": False,
        "reason": reason,
        "driver_version": None,
        "binding": None,
        "gpus": None,
    }
    for starts in manifest["engines"].values():
        assert starts[-1]["gpu_telemetry"] == {"recorded": False, "reason": reason}
    output = said(proc)
    assert output.count(reason) == 1 and "Traceback" not in output
    assert not list(run.glob("cells/*/gpu.jsonl"))
    cells = pd.read_csv(run / "cells.csv")
    assert (cells["status"] == "complete").all() and (cells["gpu_samples"] == 0).all()
    assert cells["gpu_throttled"].isna().all()  # not known, which is not "not throttled"
    verdict = verdict_of(run)
    assert verdict["verdict"] == "PASS" and verdict["excluded_cells"] == [], verdict["reasons"]
    assert verdict["gpu_throttled_cells"] == []
    text = re.sub(r"\s+", " ", pdf_text(tmp_path / "reports" / f"{run.name}.pdf"))
    page = text.index("GPU telemetry NVML, sampled")  # the telemetry page says why it is empty
    assert text.index(reason, page) < page + 400
    assert f"GPU telemetry: {reason}" in text  # and so does the environment page


def test_the_policy_is_registered_flag_or_remeasure(tmp_path):
    path = study(tmp_path, "sometimes")
    proc = specbench("validate", str(path), check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"specbench: {path}:{_line_of(path, 'gpu_throttle')}: recording.gpu_throttle:"
        " Input should be 'flag' or 'remeasure'"
    ]


def _line_of(path: Path, key: str) -> int:
    return next(
        n
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if line.strip().startswith(f"{key}:")
    )


def test_resume_remeasures_a_complete_cell_that_throttled_only_under_remeasure(tmp_path):
    """A cell finished under `flag` (or before its judgement) and resumed under `remeasure`:
    the attempt on disk is judged from its gpu.jsonl, marked invalid, measured again."""
    for policy, again in (("flag", False), ("remeasure", True)):
        registered = load_study(study(tmp_path, policy))
        cell = plan_cells(registered)[0]
        assert cell.id == FIRST
        store = RunStore(tmp_path / policy)
        store.root.mkdir()
        attempt = store.start_attempt(cell)
        with JsonlWriter(store.cell_dir(cell.id) / "requests.jsonl") as out:
            out.write(
                RequestRecord(
                    cell_id=cell.id,
                    attempt=attempt,
                    index=0,
                    item_id="a",
                    scheduled_t=0.0,
                    sent_t=0.0,
                    first_token_t=1.0,
                    end_t=2.0,
                    completion_tokens=10,
                )
            )
        with JsonlWriter(store.cell_dir(cell.id) / "gpu.jsonl") as out:
            for t, events in ((0.0, ["gpu_idle"]), (1.0, ["hw_slowdown"])):
                out.write(
                    GpuSample(
                        cell_id=cell.id,
                        attempt=attempt,
                        t=t,
                        wall_time=t,
                        ok=True,
                        gpus=[GpuReading(index=0, clock_events=events)],
                    )
                )
        store.mark_complete(cell.id, attempt, Outcome(n_ok=1, n_errors=0, aborted=False))
        said = io.StringIO()
        console = Console(file=said, width=200)
        assert needs_measuring(store, registered, cell, RunProgress(console, 0)) is again
        status = store.cell_info(cell.id)["attempts"][0]
        if again:
            assert (status["status"], status["error"]) == (
                "invalid",
                "GPU throttled: hw_slowdown in 1 of 2 samples (GPU 0)",
            )
            assert (
                "remeasuring base/chat/speed/c001: attempt 1 is unusable: GPU throttled"
                in said.getvalue()
            )
        else:
            assert status["status"] == "complete"
