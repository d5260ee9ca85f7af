"""The shards example run sequentially, handed from the first phase to the sharded test.

The sharded Ray runs need the machine alone (two studies at once), so scripts/test.sh
runs them in its second phase, one test at a time; the sequential run they are compared
with does not, so it runs in the first phase beside other tests
(`tests/run/test_shards_sequential.py`) and is kept in pytest's cache under a key of
the study and the harness's source. The sharded test takes it from there when the key
matches (the same code measured it) and runs it itself otherwise (a phase run alone, a
changed harness). Measured on 2 cores: 56 s taken out of the second phase.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from tests.run.conftest import ROOT, run_folder, specbench

STUDY = ROOT / "examples" / "scripted-shards.yaml"


def source_key() -> str:
    """sha256 over the study and every harness source file: what decides the run."""
    digest = hashlib.sha256(STUDY.read_bytes())
    for path in sorted((ROOT / "harness").rglob("*.py")):
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _cache_slot(config: pytest.Config) -> Path:
    return Path(config.cache.mkdir("specbench-shards-sequential")) / source_key()


def run_sequential(out: Path) -> Path:
    specbench("run", str(STUDY), "--results", str(out / "results"), "--no-report")
    return run_folder(out / "results")


def keep(config: pytest.Config, run: Path) -> None:
    """Leave a finished sequential run for the sharded test (replacing an older one)."""
    slot = _cache_slot(config)
    staging = slot.with_name(slot.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(run, staging / run.name)
    shutil.rmtree(slot, ignore_errors=True)
    staging.rename(slot)


def kept(config: pytest.Config) -> Path | None:
    """The sequential run the first phase kept for this code, if it is there and complete."""
    slot = _cache_slot(config)
    runs = [p for p in slot.glob("*") if (p / "manifest.json").exists()] if slot.is_dir() else []
    if len(runs) != 1:
        return None
    manifest = json.loads((runs[0] / "manifest.json").read_text())
    return runs[0] if manifest.get("status") == "complete" else None
