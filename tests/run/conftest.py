"""Helpers for running whole studies in a subprocess, as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def specbench(*args: str, cwd: Path = ROOT, env: dict | None = None, timeout: float = 600,
              check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", *args], cwd=cwd, capture_output=True, text=True,
        timeout=timeout, env={**os.environ, **(env or {})},
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"specbench {' '.join(args)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}"
            f"\n--- stderr\n{proc.stderr[-4000:]}"
        )
    return proc


def run_folder(results: Path) -> Path:
    runs = [p for p in results.iterdir() if (p / "manifest.json").exists()]
    assert len(runs) == 1, runs
    return runs[0]


def verdict_of(run: Path) -> dict:
    return json.loads((run / "verdict.json").read_text())


@pytest.fixture
def results(tmp_path: Path) -> Path:
    out = tmp_path / "results"
    out.mkdir()
    return out
