"""Roofline inputs calibrated: the probe's output read, failures recorded (never raised),
the measured figures chosen over the registered ones, and used by the plan's estimate,
the predicted speedups, the report's decomposition page and `specbench calibrate`. The
probe here is a fake (a tiny script printing JSON); the real one is run in
tests/engines/test_calibrate_probe.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from harness.analysis import analyse
from harness.calibration import (
    CalibrationFailed,
    CalibrationRecord,
    ProbeRequest,
    RegisteredFigures,
    RooflineFigures,
    effective_hardware,
    parse_probe_output,
    run_hardware,
    run_probe,
)
from harness.cli import main
from harness.plan import cell_seconds, estimate, plan_cells, roofline_step_s
from harness.prereg import load_study_file
from harness.prereg.schema import Study
from harness.run.calibrate import (
    calibrate_study,
    cpu_engine_cores,
    record_calibration,
    study_probe,
)
from harness.run.store import RunStore
from harness.rundir.manifest import Manifest

from .runfolder import RunBuilder, study_dict

ROOT = Path(__file__).resolve().parents[2]


def probe_output(bandwidth: float = 14.1, tflops: float = 0.05, **extra) -> dict:
    """One line as calibrate_probe.py prints it."""
    return {
        "device": "cpu",
        "device_name": "AMD EPYC",
        "dtype": "float32",
        "requested_dtype": "float32",
        "note": None,
        "torch": "2.13.0+cpu",
        "threads": 1,
        "cpus": [0],
        "bandwidth_gb_s": bandwidth,
        "dense_tflops": tflops,
        "bandwidth": {
            "method": "read",
            "what": "bytes read / s, sum over a float32 buffer",
            "bytes": 268435456,
            "repeats": 20,
            "best_gb_s": bandwidth,
            "median_gb_s": bandwidth * 0.9,
        },
        "matmul": {
            "m": 1024,
            "n": 1024,
            "k": 1024,
            "repeats": 20,
            "best_tflops": tflops,
            "median_tflops": tflops * 0.9,
        },
        "seconds": 4.2,
        **extra,
    }


def fake_probe(tmp_path: Path, body: str | None = None, **figures) -> Path:
    """A probe script that writes its arguments beside itself and prints `figures`'
    JSON after a line of noise (or runs `body` instead)."""
    path = tmp_path / "fake_probe.py"
    line = json.dumps(probe_output(**figures))
    path.write_text(
        body
        or (
            "import json, pathlib, sys\n"
            "pathlib.Path(__file__).with_name('argv.json').write_text(json.dumps(sys.argv[1:]))\n"
            "print('torch loaded')\n"
            f"print({line!r})\n"
        )
    )
    return path


def cpu_study(weight_bytes: float = 2.0, **launch) -> Study:
    """A study whose baseline runs the CPU build of vLLM from this interpreter."""
    data = study_dict()
    data["model"]["weight_bytes_per_param"] = weight_bytes
    data["arms"] = [
        {"name": "cpu-base", "engine": "vllm-cpu", "launch": {"python": sys.executable, **launch}},
        {
            "name": "cpu-ngram",
            "engine": "vllm-cpu",
            "launch": {"python": sys.executable, **launch},
            "baseline": "cpu-base",
            "drafter": {"method": "ngram", "num_draft_tokens": 3},
        },
    ]
    data["bars"]["pass"]["identity"] = None
    data["bars"]["pass"]["accuracy"] = None
    data["tasks"] = [{"name": "chat", "kind": "chat", "uses": ["speed"], "max_tokens": 128}]
    data["loads"].pop("open_loop")
    return Study.model_validate(data)


def ok_record(study: Study, bandwidth: float, tflops: float) -> CalibrationRecord:
    measured = parse_probe_output(
        json.dumps(probe_output(bandwidth, tflops)), when=1.0, interpreter="python"
    )
    return CalibrationRecord(status="ok", measured=measured, registered=RegisteredFigures.of(study))


# --- the probe's output --------------------------------------------------------------


def test_the_probes_json_line_is_read_after_any_other_output():
    text = "loading torch\n" + json.dumps(probe_output(14.1, 0.05)) + "\n"
    cal = parse_probe_output(text, when=123.0, interpreter="/venv/bin/python")
    assert (cal.bandwidth_gb_s, cal.dense_tflops) == (14.1, 0.05)
    assert cal.when == 123.0 and cal.interpreter == "/venv/bin/python"
    assert cal.bandwidth.method == "read" and cal.matmul.n == 1024 and cal.cpus == [0]


@pytest.mark.parametrize(
    ("stdout", "says"),
    [
        ("no json here\n", "printed no JSON line"),
        ("{not json\n", "not JSON"),
        (json.dumps(probe_output(bandwidth=-1.0)) + "\n", "bandwidth_gb_s"),
        (json.dumps(probe_output(surprise=1)) + "\n", "surprise"),
    ],
)
def test_output_that_is_not_a_probe_line_is_a_failure_naming_why(stdout, says):
    with pytest.raises(CalibrationFailed, match=says):
        parse_probe_output(stdout, when=0.0, interpreter="python")


def test_the_probe_is_run_with_the_device_dtype_and_cores_asked_for(tmp_path):
    probe = fake_probe(tmp_path, bandwidth=20.0, tflops=0.08)
    cal = run_probe(
        ProbeRequest(sys.executable, "cpu", "float32", threads=1, cpus=[0]), probe=probe
    )
    assert (cal.bandwidth_gb_s, cal.dense_tflops) == (20.0, 0.08)
    assert json.loads((tmp_path / "argv.json").read_text()) == [
        "--device",
        "cpu",
        "--dtype",
        "float32",
        "--threads",
        "1",
        "--cpus",
        "0",
    ]


@pytest.mark.parametrize(
    ("body", "timeout", "says"),
    [
        (
            "import sys\nprint('calibrate_probe: torch is not importable', file=sys.stderr)\n"
            "sys.exit(1)\n",
            30.0,
            "exited 1: calibrate_probe: torch is not importable",
        ),
        ("import time\ntime.sleep(30)\n", 0.5, "ran past its 0.5 s timeout"),
    ],
)
def test_a_probe_that_fails_or_hangs_is_recorded_not_raised(tmp_path, body, timeout, says):
    study = cpu_study()
    record = calibrate_study(study, timeout_s=timeout, probe=fake_probe(tmp_path, body))
    assert record.reason is not None
    assert record.status == "failed" and says in record.reason
    assert record.measured is None and record.interpreter == sys.executable
    assert record.registered.memory_bandwidth_gb_s == 1000
    # ...and the roofline then keeps the registered figures, saying why.
    hw = effective_hardware(study, record)
    assert hw.source == "registered" and hw.used == RooflineFigures(1000, 100)
    assert says in hw.line()


def test_a_missing_interpreter_is_a_failure_not_an_exception(tmp_path):
    record = calibrate_study(
        cpu_study(), python=str(tmp_path / "no-python"), probe=fake_probe(tmp_path)
    )
    assert record.reason is not None
    assert record.status == "failed" and "cannot run it" in record.reason


def test_a_scripted_study_is_skipped_without_starting_a_process(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a process was started")

    monkeypatch.setattr("harness.calibration.subprocess.run", refuse)
    study = load_study_file(ROOT / "examples" / "scripted-pass.yaml").study
    record = calibrate_study(study)
    assert record.reason is not None
    assert record.status == "skipped" and "scripted test engine" in record.reason
    assert record.registered.dense_tflops == 40


# --- what the probe is asked for -----------------------------------------------------


@pytest.mark.parametrize(
    ("weight_bytes", "dtype"), [(2, "bfloat16"), (4, "float32"), (1, "float8"), (3, "bfloat16")]
)
def test_the_dtype_follows_the_models_precision(weight_bytes, dtype):
    probe = study_probe(cpu_study(weight_bytes))
    assert probe.request is not None and probe.request.dtype == dtype
    assert probe.dtype_why is not None
    assert f"weight_bytes_per_param {weight_bytes:g}" in probe.dtype_why


def test_the_dtype_the_baseline_engine_computes_in_comes_first():
    probe = study_probe(cpu_study(2.0, dtype="float16"))
    assert probe.request is not None
    assert probe.dtype_why is not None
    assert probe.request.dtype == "float16" and "cpu-base" in probe.dtype_why
    forced = study_probe(cpu_study(2.0), dtype="float32").request
    assert forced is not None and forced.dtype == "float32"  # --dtype


def test_a_cpu_engine_is_measured_on_its_workers_cores(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert cpu_engine_cores() == [0, 1, 2]  # auto: the last core is left to the rest
    assert cpu_engine_cores("auto") == [0, 1, 2]
    assert cpu_engine_cores("1-2|3") == [1, 2]  # an explicit list: the first worker's
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    request = study_probe(cpu_study()).request
    assert request is not None
    assert (request.device, request.cpus, request.threads) == ("cpu", [0], 1)
    assert request.python == sys.executable
    assert request.env is not None
    assert request.env["VLLM_CPU_OMP_THREADS_BIND"] == "auto"  # the arm's environment


def test_a_gpu_engine_is_measured_on_the_gpu_its_arm_sees():
    data = study_dict()
    data["arms"][0].pop("attach")
    data["arms"][0]["launch"] = {
        "python": "/gpu/venv/bin/python",
        "env": {"CUDA_VISIBLE_DEVICES": "3"},
    }
    request = study_probe(Study.model_validate(data)).request
    assert request is not None
    assert (request.device, request.python, request.cpus) == (
        "cuda:0",
        "/gpu/venv/bin/python",
        None,
    )
    assert request.env is not None
    assert request.env["CUDA_VISIBLE_DEVICES"] == "3"
    chosen = study_probe(Study.model_validate(data), gpu=2).request
    assert chosen is not None and chosen.device == "cuda:2"
    # An arm attached to an endpoint has no engine environment here.
    skipped = study_probe(Study.model_validate(study_dict()))
    assert skipped.skip is not None
    assert skipped.request is None and "attaches" in skipped.skip


# --- which figures the roofline uses -------------------------------------------------


def test_the_measured_figures_are_used_and_the_registered_kept_beside():
    study = Study.model_validate(
        {
            **study_dict(),
            "hardware": {"gpu": "none", "memory_bandwidth_gb_s": 12, "dense_tflops": 0.15},
        }
    )
    hw = effective_hardware(study, ok_record(study, 14.1, 0.05))
    assert hw.source == "measured" and hw.used == RooflineFigures(14.1, 0.05)
    assert hw.registered == RooflineFigures(12, 0.15)
    assert hw.line() == ("roofline inputs: measured 14.1 GB/s, 0.05 TFLOP/s (registered 12, 0.15)")
    assert (
        effective_hardware(study, ok_record(study, 14.1, 0.05).measured).used.dense_tflops == 0.05
    )
    none = effective_hardware(study, None)
    assert none.source == "registered" and none.used == RooflineFigures(12, 0.15)
    assert none.line() == "roofline inputs: registered 12 GB/s, 0.15 TFLOP/s (not calibrated)"


def test_the_plan_estimate_uses_measured_figures_when_given():
    study = cpu_study()
    # 1e9 params x 2 B: 2 ms a step at 1000 GB/s, 4 ms at 500 GB/s (memory-bound at batch 1).
    assert roofline_step_s(study, 1) == pytest.approx(2e-3)
    assert roofline_step_s(study, 1, figures=RooflineFigures(500, 100)) == pytest.approx(4e-3)
    cells = plan_cells(study, sizes={"chat": 100})
    registered = estimate(study, cells)
    measured = estimate(study, cells, effective_hardware(study, ok_record(study, 500, 100)))
    # Every cell is memory-bound at either bandwidth (64 tokens at 16 users: 1.28 ms of
    # FLOPs): half the bandwidth doubles the cells' time; engine starts stay.
    cell_time = sum(cell_seconds(study, c) for c in cells)
    assert cell_time > 0
    assert measured.seconds - registered.seconds == pytest.approx(cell_time)
    assert "measured 500 GB/s, 100 TFLOP/s (registered 1000, 100)" in measured.assumptions[0]
    assert "measured" not in registered.assumptions[0]


def test_a_runs_predictions_use_its_measured_figures(tmp_path, capsys):
    b = RunBuilder(tmp_path)
    b.speed_cells(levels=[16], tasks=("chat",))
    before = analyse(b.root).speedups.set_index(["arm", "task", "concurrency"])
    # Registered 1000 GB/s, 100 TFLOP/s: n-gram's 64-token verification at 16 users is
    # memory-bound like the plain step, so a round costs one step.
    assert before.loc[("vllm-ngram", "chat", 16), "predicted_round_cost_ratio"] == pytest.approx(
        1.0
    )
    # Measured 10 TFLOP/s: 2e9 x 64 / 1e13 = 12.8 ms against a 3.2 ms plain step.
    b.manifest.calibration = ok_record(b.study, 1000, 10)
    b.write_manifest()
    a = analyse(b.root)
    after = a.speedups.set_index(["arm", "task", "concurrency"])
    assert after.loc[("vllm-ngram", "chat", 16), "predicted_round_cost_ratio"] == pytest.approx(4.0)
    assert after.loc[("vllm-ngram", "chat", 16), "predicted_speedup"] == pytest.approx(
        before.loc[("vllm-ngram", "chat", 16), "predicted_speedup"] / 4
    )
    # The decomposition page names both sets of figures above its table.
    from harness.report.views.decomposition import decomposition_lines

    lines = decomposition_lines(a, "chat")
    assert lines[0] == ("roofline inputs: measured 1000 GB/s, 10 TFLOP/s (registered 1000, 100)")
    # ...and so does `specbench analyse`.
    assert main(["analyse", str(b.root)]) == 0
    assert (
        "predicted on the roofline inputs: measured 1000 GB/s, 10 TFLOP/s (registered 1000, 100)"
    ) in capsys.readouterr().out
    failed = Manifest.model_validate(
        {
            "run_id": "r",
            "calibration": {
                "status": "failed",
                "reason": "no torch",
                "registered": {"gpu": "test", "memory_bandwidth_gb_s": 1000, "dense_tflops": 100},
            },
        }
    )
    assert run_hardware(b.study, failed).line() == (
        "roofline inputs: registered 1000 GB/s, 100 TFLOP/s (calibration failed: no torch)"
    )


# --- the run's record ----------------------------------------------------------------


def store_in(tmp_path: Path) -> RunStore:
    store = RunStore(tmp_path / "run")
    store.root.mkdir()
    store.create_manifest(Manifest(run_id="run", status="running"))
    return store


def test_the_run_records_a_failure_and_goes_on(tmp_path):
    store, study = store_in(tmp_path), cpu_study()
    notes: list[str] = []

    def broken(_study):
        raise RuntimeError("the engine kind could not say")

    record = record_calibration(store, study, notes.append, calibrate=broken)
    assert record.status == "failed"
    saved = store.manifest().to_json()["calibration"]
    assert saved["status"] == "failed" and "could not say" in saved["reason"]
    assert saved["registered"] == {
        "gpu": "test",
        "memory_bandwidth_gb_s": 1000,
        "dense_tflops": 100,
    }
    assert "registered figures" in notes[0]


def test_the_run_records_its_calibration_once_and_a_resume_keeps_it(tmp_path):
    store, study = store_in(tmp_path), cpu_study()
    notes: list[str] = []
    probe = fake_probe(tmp_path, bandwidth=14.1, tflops=0.05)
    calls = []

    def calibrate(s):
        calls.append(1)
        return calibrate_study(s, probe=probe)

    record_calibration(store, study, notes.append, calibrate=calibrate)
    saved = store.manifest().to_json()["calibration"]
    assert saved["status"] == "ok" and saved["measured"]["bandwidth_gb_s"] == 14.1
    assert saved["registered"]["memory_bandwidth_gb_s"] == 1000
    assert notes == ["roofline inputs: measured 14.1 GB/s, 0.05 TFLOP/s (registered 1000, 100)"]
    record_calibration(store, study, notes.append, calibrate=calibrate)  # a resume
    assert len(calls) == 1 and "kept" in notes[1]


def test_specbench_run_calibrates_after_the_folder_exists_and_before_the_runner(
    tmp_path, monkeypatch
):
    seen = {}

    class StopHere(Exception):
        pass

    class Runner:
        def __init__(self, store, *args, **kwargs):
            self.store = store

        def run(self):
            seen.update(self.store.manifest().to_json())
            raise StopHere

    monkeypatch.setattr("harness.commands.run.Runner", Runner)
    with pytest.raises(StopHere):
        main(
            [
                "run",
                str(ROOT / "examples" / "scripted-pass.yaml"),
                "--results",
                str(tmp_path / "results"),
                "--no-report",
            ]
        )
    assert seen["calibration"]["status"] == "skipped"
    assert "scripted test engine" in seen["calibration"]["reason"]


# --- specbench calibrate -------------------------------------------------------------


def test_calibrate_refuses_a_bad_study_file_in_one_line(tmp_path, capsys):
    data = yaml.safe_load((ROOT / "examples" / "scripted-pass.yaml").read_text())
    data["hardware"]["memory_bandwith_gb_s"] = 12  # a typo
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    assert main(["calibrate", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and "memory_bandwith_gb_s" in err[0]
    assert main(["calibrate", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml" in capsys.readouterr().err


def test_calibrate_says_what_cannot_be_measured_and_exits_2(capsys):
    assert main(["calibrate", str(ROOT / "examples" / "scripted-pass.yaml")]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "scripted test engine" in line and "--python" in line
    assert main(["calibrate", "--gpu", "-1"]) == 2
    assert main(["calibrate", "--python", "/no/such/python"]) == 2


def test_calibrate_prints_measured_beside_registered(tmp_path, monkeypatch, capsys):
    probe = fake_probe(tmp_path, bandwidth=14.1, tflops=0.05)
    monkeypatch.setattr("harness.calibration.CALIBRATE_PROBE", probe)
    data = yaml.safe_load((ROOT / "examples" / "scripted-pass.yaml").read_text())
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(data))
    # Calibrating a scripted study needs an interpreter named for it.
    code = main(["calibrate", str(study), "--python", sys.executable, "--format", "json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "ok" and out["measured"]["bandwidth_gb_s"] == 14.1
    assert out["registered"]["memory_bandwidth_gb_s"] == 2000
    assert out["roofline_inputs"] == {
        "source": "measured",
        "memory_bandwidth_gb_s": 14.1,
        "dense_tflops": 0.05,
    }
    assert main(["calibrate", str(study), "--python", sys.executable]) == 0
    text = capsys.readouterr().out
    assert "roofline inputs: measured 14.1 GB/s, 0.05 TFLOP/s (registered 2000, 40)" in text
    assert "bandwidth GB/s" in text and "2000" in text
