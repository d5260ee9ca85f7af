"""The group-sequential design on the real vLLM CPU engine: examples/cpu-sequential.yaml cut
to chat at one user in up to three sessions (the default looks: after 2 and 3), no smoke
and no identity cells, so that it costs at most six engine starts (~3-5 min on 2 cores).
Whatever the host's session variation lets the look decide, the run must have done what
the look it recorded says, and that look must be the one the harness's own analysis of
the folder, as it stood after session 2, gives."""

from __future__ import annotations

import json

import pytest
import yaml

from harness.analysis import analyse
from harness.analysis.load import load_run
from harness.analysis.sequential import judge_look, look_levels, needed_cells, run_at_look
from harness.prereg import load_study
from tests.run.conftest import ROOT, run_folder, specbench, verdict_of


@pytest.mark.timeout(1500)
def test_a_sequential_study_on_the_cpu_engine_runs_the_looks_it_records(
        tmp_path, tiny_pair_dir, vllm_cpu_python, vllm_cpu_engines):
    vllm_cpu_engines.stop_all()  # the study starts its own engines
    data = yaml.safe_load((ROOT / "examples" / "cpu-sequential.yaml").read_text())
    data["loads"]["closed_loop"]["concurrency"] = [1]
    data["tasks"][0]["uses"] = ["speed"]
    data["recording"] |= {"sessions": 3, "smoke": False}
    data["design"] = {"kind": "group_sequential"}
    data["bars"]["pass"] |= {"speed": {"threshold": 1.5, "concurrencies": [1]},
                             "identity": None}
    data["bars"]["stop"]["concurrencies"] = [1]
    path = tmp_path / "cpu-sequential.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    env = {"SPECBENCH_TINY_PAIR": str(tiny_pair_dir), "SPECBENCH_VLLM_CPU_PYTHON": vllm_cpu_python}
    proc = specbench("run", str(path), "--results", str(tmp_path / "results"), "--reports",
                     str(tmp_path / "reports"), env=env, timeout=1500, check=False)
    assert proc.returncode in (0, 3), (proc.stdout + proc.stderr)[-4000:]
    run = run_folder(tmp_path / "results")
    manifest = json.loads((run / "manifest.json").read_text())
    (look,) = manifest["looks"]
    study = load_study(path)
    assert (look["stage"], look["look"], look["of"]) == (1, 2, 3)
    assert look["level"] == pytest.approx(look_levels(study)[2])

    # The look again, from the folder as it stood after session 2: the same decisions and
    # the same cells left out.
    again = judge_look(analyse(run_at_look(load_run(run), 1, 2)))
    assert [(d.bar, d.part, d.outcome) for d in again.decided] == [
        (d["bar"], d["part"], d["outcome"]) for d in look["decided"]]
    keep = needed_cells(study, again)
    third = [f"{arm}/chat/speed/c001/s3" for arm in ("cpu-base", "cpu-draft")]
    assert sorted(look["skipped"]) == sorted(c for c in third if c.rsplit("/", 1)[0] not in keep)
    for cell in third:
        done = (run / "cells" / cell.replace("/", "__") / "complete.json").exists()
        assert done == (cell not in look["skipped"]), cell

    # The verdict and the report say when each bar was decided, and what it cost.
    verdict = verdict_of(run)
    design = verdict["design"]
    bars = {b["bar"]: b for b in design["bars"]}
    assert set(bars) == {"pass.speed", "stop", "check"}
    for name, b in bars.items():
        early = any(d["bar"] == name and d["part"] == "" for d in look["decided"])
        assert (b["look"], b["boundary"]) == ((2, "interval") if early else (3, "final")), b
    assert design["gpu_hours"] <= design["gpu_hours_fixed"]
    assert (design["gpu_hours"] < design["gpu_hours_fixed"]) == bool(look["skipped"])
    page = (tmp_path / "reports" / f"{run.name}.html").read_text()
    assert "Design: group-sequential, looks after sessions 2, 3 of 3" in page
