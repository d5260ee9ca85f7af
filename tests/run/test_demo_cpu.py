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
    # The demo's verdict is not pinned yet: on this tiny model it moves with the host's
    # load (measured on fresh clones: FAIL on the 2x speed bar on a quiet machine; with
    # one core kept busy the baseline slowed more than the drafters, speed passed, and a
    # cell delivered 7.68 of 8 users: INCOMPLETE). Issue 17's demo is to make it one.
    # What holds either way: no drafter is below the stop threshold, and every cell a bar
    # left out was rejected by the client-health checks, with the reason.
    assert verdict["verdict"] in {"PASS", "FAIL", "INCOMPLETE"}, verdict["verdict"]
    assert {b["name"] for b in verdict["bars"]} >= {"pass.speed", "stop", "check"}
    status = {b["name"]: b["status"] for b in verdict["bars"]}
    assert status["stop"] == "not_fired", status
    for excluded in verdict["excluded_cells"]:
        assert excluded["reason"].startswith("client unhealthy"), excluded
    # INCOMPLETE exactly when a bar is, or a fired check bar's baseline rerun disagreed
    # (seen with the machine loaded: the baseline's 8-user cells ran 5x slower than the
    # drafters', the check fired, and the rerun did not agree with the first run).
    assert (verdict["verdict"] == "INCOMPLETE") == (
        any(s == "incomplete" for s in status.values()) or status["check"] == "unresolved"
    ), status

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
