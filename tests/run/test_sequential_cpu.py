"""The group-sequential design on the real vLLM CPU engine: a study of the shared engines
(no drafter and n-gram on the tiny model, attached: the suite starts them once) on chat at
one user in up to three sessions, the default looks after 2 and 3. Whatever the host's
session variation lets the look decide, the run must have done what the look it recorded
says, and that look must be the one the harness's own analysis of the folder, as it stood
after session 2, gives. (examples/cpu-sequential.yaml, the demo's pair in four sessions of
fresh engine starts, takes ~25 min on 2 cores: docs/benchmarks/sequential-design.md.)"""

from __future__ import annotations

import json

import pytest
import yaml

from harness.analysis import analyse
from harness.analysis.design import look_levels
from harness.analysis.load import load_run
from harness.analysis.sequential import judge_look, needed_cells, run_at_look
from harness.prereg import load_study
from tests.run.conftest import run_folder, specbench, verdict_of


def attach(engine) -> dict:
    return {"base_url": engine.base_url, "metrics": "vllm", "served_model": engine.served_model}


@pytest.mark.timeout(1200)
def test_a_sequential_study_on_the_cpu_engine_runs_the_looks_it_records(
    tmp_path, tiny_model_dir, vllm_cpu_engines
):
    vllm_cpu_engines.start_together("nodrafter", "ngram")
    base, ngram = vllm_cpu_engines.get("nodrafter"), vllm_cpu_engines.get("ngram")
    data = {
        "title": "sequential on the CPU engine",
        "registered": "2026-12-06",
        "hardware": {
            "gpu": "none (CPU build of vLLM)",
            "memory_bandwidth_gb_s": 12,
            "dense_tflops": 0.15,
        },
        "model": {
            "id": str(tiny_model_dir),
            "served_name": base.served_model,
            "params_billion": 0.01,
        },
        "arms": [
            {"name": "base", "engine": "vllm-cpu", "attach": attach(base)},
            {
                "name": "ngram",
                "engine": "vllm-cpu",
                "attach": attach(ngram),
                "baseline": "base",
                "drafter": {"method": "ngram", "num_draft_tokens": 3},
            },
        ],
        "loads": {
            "closed_loop": {
                "concurrency": [1],
                "requests": {"min": 8, "per_user": 8},
                "warmup_per_user": 1,
            }
        },
        "tasks": [
            {"name": "chat", "kind": "chat", "uses": ["speed"], "max_tokens": 32, "subset": 16}
        ],
        "recording": {
            "sessions": 3,
            "smoke": False,
            "lag_limit_p99_ms": 50,
            "min_delivered_share": 0.9,
        },
        "design": {"kind": "group_sequential"},
        "bars": {
            "pass": {
                "speed": {"threshold": 1.0, "concurrencies": [1]},
                "identity": None,
                "accuracy": None,
                "knee": {"required": False},
            },
            "stop": {"threshold": 0.5, "concurrencies": [1]},
            "intervals": {"bootstrap_resamples": 200},
        },
    }
    path = tmp_path / "cpu-sequential.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = specbench(
        "run",
        str(path),
        "--results",
        str(tmp_path / "results"),
        "--reports",
        str(tmp_path / "reports"),
        timeout=1200,
        check=False,
    )
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
        (d["bar"], d["part"], d["outcome"]) for d in look["decided"]
    ]
    keep = needed_cells(study, again)
    third = [f"{arm}/chat/speed/c001/s3" for arm in ("base", "ngram")]
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
