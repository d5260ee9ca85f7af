"""A GPU study (vllm arms) with an unpinned revision and an open marker: `specbench run`
refuses it in one line; with --allow-unpinned it runs, and the manifest and the report's
verdict page carry the deviation, the manifest each checkpoint's commit and weight sha256.

The arms attach to two scripted test engines standing in for vLLM servers, so the whole
run takes seconds and no GPU; the target is the tiny model in a hub cache built offline.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from harness.testengine.process import ScriptedEngineProcess
from harness.testengine.spec import ScriptedEngineSpec
from tests.run.conftest import pdf_text, run_folder, specbench
from tests.weights.hubcache import build_hub_cache

ENGINE: dict[str, Any] = {
    "weight_bytes": 2.0e10,
    "bandwidth_bytes_per_s": 2.0e12,
    "flops_per_token": 2.0e10,
    "flops_per_s": 4.0e13,
    "served_model": "tiny",
    "seed": 1,
}


def study(base_url: str, draft_url: str) -> dict:
    attach = {"metrics": "vllm", "served_model": "tiny"}
    return {
        "title": "pinned-run test",
        "registered": "2026-11-30",
        "hardware": {"gpu": "H100", "memory_bandwidth_gb_s": 2000, "dense_tflops": 1000},
        "model": {
            "id": "specbench/tiny",
            "revision": "main",
            "served_name": "tiny",
            "params_billion": 0.001,
        },
        "arms": [
            {"name": "base", "engine": "vllm", "attach": {"base_url": base_url, **attach}},
            {
                "name": "draft",
                "engine": "vllm",
                "attach": {"base_url": draft_url, **attach},
                "drafter": {"method": "ngram", "num_draft_tokens": 4},
                "baseline": "base",
            },
        ],
        "loads": {
            "closed_loop": {
                "concurrency": [1],
                "requests": {"min": 4, "per_user": 4},
                "warmup_per_user": 1,
            }
        },
        "tasks": [
            {"name": "chat", "kind": "chat", "uses": ["speed"], "max_tokens": 16, "subset": 8}
        ],
        "recording": {
            "sessions": 1,
            "lag_limit_p99_ms": 1000,
            "min_delivered_share": 0.5,
            "cell_retries": 0,
        },
        "bars": {
            "pass": {
                "speed": {"concurrencies": [1]},
                "identity": None,
                "knee": {"required": False},
            },
            "stop": {"concurrencies": [1], "threshold": 0.01},
            "check": {"threshold": 1000},
            "intervals": {"bootstrap_resamples": 200},
        },
    }


def test_unpinned_gpu_study_is_refused_then_runs_with_the_deviation_recorded(tmp_path) -> None:
    hub = build_hub_cache(tmp_path / "weights")
    env = {
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": str(hub.root),
        "SPECBENCH_CACHE": str(tmp_path / "specbench-cache"),
    }
    drafter = {**ENGINE, "num_draft_tokens": 4, "accept_probs": [0.9, 0.8, 0.7, 0.6]}
    with (
        ScriptedEngineProcess(ScriptedEngineSpec(**ENGINE), tmp_path / "e1") as base,
        ScriptedEngineProcess(ScriptedEngineSpec(**drafter), tmp_path / "e2") as draft,
    ):
        path = tmp_path / "study.yaml"
        text = yaml.safe_dump(study(base.base_url, draft.base_url), sort_keys=False)
        path.write_text(text + "# TO FIX BEFORE THE RUN: confirm the tuned flags\n")
        marker_line = len(text.splitlines()) + 1
        results, reports = tmp_path / "results", tmp_path / "reports"
        args = ["run", str(path), "--results", str(results), "--reports", str(reports)]

        refused = specbench(*args, env=env, check=False)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        [line] = refused.stderr.strip().splitlines()
        assert "not pinned for a GPU run (vllm arms)" in line
        assert "model specbench/tiny@main" in line and f"study.yaml:{marker_line}" in line
        assert not results.exists()

        specbench(*args, "--allow-unpinned", env=env)
    run = run_folder(results)
    manifest = json.loads((run / "manifest.json").read_text())
    [deviation] = manifest["deviations"]
    assert deviation["what"] == "ran with unpinned revisions or open markers (--allow-unpinned)"
    assert [(u["checkpoint"], u["revision"]) for u in deviation["unpinned"]] == [
        ("specbench/tiny", "main")
    ]
    assert deviation["open_markers"] == [
        f"{path}:{marker_line}: TO FIX BEFORE THE RUN: confirm the tuned flags"
    ]
    [checkpoint] = manifest["checkpoints"]
    assert checkpoint["commit"] == hub.target_commit and checkpoint["revision"] == "main"
    assert checkpoint["weights"][0]["sha256"] == hub.weights_sha256
    # The verdict page says so, where a reader of the verdict cannot miss it.
    text = pdf_text(reports / f"{run.name}.pdf", page=1)
    assert "Deviations from the registered study" in text
    assert "ran with unpinned revisions or open markers (--allow-unpinned)" in text
    assert "unpinned: model specbench/tiny at revision main" in text
    assert "open marker:" in text
