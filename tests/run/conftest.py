"""Helpers for running whole studies in a subprocess, as a user would."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]

# The scripted engine of examples/scripted-pass.yaml: a 10 ms weight pass, 0.5 ms a token.
SCRIPTED_ENGINE = {
    "weight_bytes": 2.0e10,
    "bandwidth_bytes_per_s": 2.0e12,
    "flops_per_token": 2.0e10,
    "flops_per_s": 4.0e13,
    "seed": 1,
}


def write_scripted_study(folder: Path, name: str, title: str, **sections: object) -> Path:
    """A study of scripted-engine arms written as `folder/name.yaml`: the hardware and
    model every such study declares, and the sections given (arms, loads, tasks, ...)."""
    data = {
        "title": title,
        "registered": "2026-12-05",
        "hardware": {"gpu": "scripted (no GPU)", "memory_bandwidth_gb_s": 2000, "dense_tflops": 40},
        "model": {
            "id": "scripted",
            "served_name": "scripted",
            "params_billion": 10,
            "weight_bytes_per_param": 2,
        },
        **sections,
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def scripted_arms(
    accept_probs: list[float],
    *,
    engine: str = "scripted",
    drafter: dict[str, object] | None = None,
    **scripted: object,
) -> list[dict[str, object]]:
    """'base' and 'drafter' on SCRIPTED_ENGINE: a scripted draft of k = len(accept_probs)
    tokens accepted at `accept_probs`; `drafter` adds to the declared drafter, `scripted`
    to the drafter arm's script (accept_draws, speed_factor, ...)."""
    k = len(accept_probs)
    return [
        {"name": "base", "engine": engine, "launch": {}, "scripted": dict(SCRIPTED_ENGINE)},
        {
            "name": "drafter",
            "engine": engine,
            "launch": {},
            "baseline": "base",
            "drafter": {"method": "scripted-draft", "num_draft_tokens": k, **(drafter or {})},
            "scripted": {
                **SCRIPTED_ENGINE,
                "num_draft_tokens": k,
                "accept_probs": accept_probs,
                **scripted,
            },
        },
    ]


def scripted_recording(**varies: object) -> dict[str, object]:
    """A scripted study's recording: one session, the client's lag p99 within 25 ms, 90%
    of the load delivered, the host's regime timing off; `varies` replaces or adds."""
    return {
        "sessions": 1,
        "lag_limit_p99_ms": 25,
        "min_delivered_share": 0.9,
        "regime": {"enabled": False},
        **varies,
    }


def scripted_bars(resamples: int = 200, **passing: object) -> dict[str, object]:
    """Pass and stop bars read at one user: speed 1.2x, the knee passing beyond the top
    level, `passing` replacing or adding parts of the pass bar; `resamples` bootstrap
    resamples for the intervals."""
    return {
        "pass": {
            "speed": {"threshold": 1.2, "concurrencies": [1]},
            "knee": {"beyond_top": "pass"},
            **passing,
        },
        "stop": {"concurrencies": [1]},
        "intervals": {"bootstrap_resamples": resamples},
    }


def specbench(
    *args: str, cwd: Path = ROOT, env: dict | None = None, timeout: float = 600, check: bool = True
) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"specbench {' '.join(args)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}"
            f"\n--- stderr\n{proc.stderr[-4000:]}"
        )
    return proc


def pdf_text(pdf: Path, page: int | None = None) -> str:
    """The PDF's text as `pdftotext -layout` lays it out, pages split by form feeds;
    `page`: that page alone (1 the first)."""
    tool = shutil.which("pdftotext")
    assert tool, "pdftotext not found: install poppler-utils (apt-get install -y poppler-utils)"
    pages = ["-f", str(page), "-l", str(page)] if page else []
    return subprocess.run(
        [tool, *pages, "-layout", str(pdf), "-"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout


def start_run(study: Path | str, results: Path, *extra: str, **popen: Any) -> subprocess.Popen:
    """`specbench run STUDY --results RESULTS --no-report [EXTRA...]` started in the
    background from the repository root (`popen`: its output, session, ...), for a test
    that stops it."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            str(study),
            "--results",
            str(results),
            "--no-report",
            *extra,
        ],
        cwd=ROOT,
        **popen,
    )


def run_folder(results: Path) -> Path:
    runs = [p for p in results.iterdir() if (p / "manifest.json").exists()]
    assert len(runs) == 1, runs
    return runs[0]


def copy_of_run(folder: Path, study_name: str, tmp_path: Path) -> tuple[Path, Path]:
    """Copy `folder` (a study file `study_name` beside the `results/` of its one run)
    under tmp_path, the manifest naming the copied study file, so that `--resume`
    finds the copy as the newest run of that file. Returns (study, results)."""
    copy = tmp_path / folder.name
    shutil.copytree(folder, copy)
    study, results = copy / study_name, copy / "results"
    manifest_path = run_folder(results) / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    assert manifest["study_file"] == str((folder / study_name).resolve())
    manifest["study_file"] = str(study.resolve())
    manifest_path.write_text(json.dumps(manifest))
    return study, results


def verdict_of(run: Path) -> dict:
    """verdict.json as written, read back through its model (every key present)."""
    from harness.rundir.verdict import read_verdict

    return read_verdict(run / "verdict.json").to_json()


@pytest.fixture
def results(tmp_path: Path) -> Path:
    out = tmp_path / "results"
    out.mkdir()
    return out
