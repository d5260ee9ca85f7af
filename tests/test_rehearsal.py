"""The rehearsal study (harness/rehearsal/) built from a registration: every vLLM arm
with its registered drafter settings on the CPU build and the tiny pair, and every
difference from the GPU day derived from what was registered. The real run:
tests/run/test_rehearsal_cpu.py."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from harness.prereg import load_study
from harness.prereg.schema import Study
from harness.rehearsal import FULL, SMALL, rehearsal_study, study_yaml
from tests.run.conftest import specbench

PAIR = Path("/models/pair")


def registered() -> Study:
    return load_study("prereg.yaml")


def sentences(diffs) -> str:
    return "\n".join(d.sentence() for d in diffs)


def test_prereg_rehearsal_keeps_every_vllm_arm_with_its_registered_settings() -> None:
    study = registered()
    cpu, diffs = rehearsal_study(study, PAIR, FULL)
    vllm = [a for a in study.arms if a.engine == "vllm"]
    assert [a.name for a in cpu.arms] == [a.name for a in vllm]
    for arm in cpu.arms:
        written = study.arm(arm.name)
        assert arm.engine == "vllm-cpu" and arm.baseline == written.baseline
        assert arm.max_running_requests == written.max_running_requests
        assert arm.launch is not None  # every rehearsal arm is launched
        assert arm.launch.dtype == "cpu_native" and "--enforce-eager" in arm.launch.extra_args
        assert "--gpu-memory-utilization" not in arm.launch.extra_args
        assert "--no-enable-prefix-caching" in arm.launch.extra_args  # the CPU build takes it
        if written.drafter is None:
            continue
        d, w = arm.drafter, written.drafter
        assert d is not None
        assert (d.num_draft_tokens, d.options) == (w.num_draft_tokens, w.options)
        assert d.method == {"ngram_gpu": "ngram"}.get(w.method, w.method)
    eagle, ngram = cpu.arm("vllm-eagle3").drafter, cpu.arm("vllm-ngram").drafter
    assert eagle is not None and ngram is not None
    assert eagle.model == str(PAIR / "eagle3")
    # The CPU build cannot start ngram_gpu; the same prompt lookup runs as ngram.
    assert ngram.method == "ngram"
    assert cpu.model.id == str(PAIR / "target") and cpu.model.quantization is None
    assert cpu.bars == study.bars and cpu.sampling == study.sampling  # the registered bars
    assert cpu.loads.closed_loop.concurrency == study.loads.closed_loop.concurrency
    assert cpu.recording.sessions == study.recording.sessions == 3
    said = sentences(diffs)
    for text in (
        "engine (arms sglang-dflash, sglang-base): registered sglang; here not run",
        "model.quantization: registered fp8; here none",
        "async scheduling (arms vllm-base, vllm-eagle3, vllm-ngram): registered on",
        "CUDA graphs (arms vllm-base, vllm-eagle3, vllm-ngram)",
        "flag (arms vllm-base, vllm-eagle3, vllm-ngram): registered"
        " --gpu-memory-utilization 0.90; here left out",
        "recording.lag_limit_p99_ms: registered 5; here 15",
        "drafter.method (arm vllm-ngram): registered ngram_gpu; here ngram (the same"
        " prompt_lookup_min/max) (vLLM 0.32's CPU build cannot start ngram_gpu",
    ):
        assert text in said, text
    assert "recording.sessions" not in said  # kept as registered at full scale


def test_small_scale_cuts_levels_tasks_and_sessions_and_says_so() -> None:
    study = registered()
    cpu, diffs = rehearsal_study(study, PAIR, SMALL)
    assert cpu.loads.closed_loop.concurrency == [1, 2, 4]  # the pass and stop bars' levels
    assert [t.name for t in cpu.tasks if "speed" in t.uses] == ["chat"]
    # The speed task and the accuracy bar's tasks: HumanEval, which no bar reads but the
    # identity bar beside chat and GSM8K, is left out.
    assert [t.name for t in cpu.tasks] == ["chat", "gsm8k", "mmlu"]
    assert cpu.recording.sessions == 1
    assert all(
        t.max_tokens == 16 and t.subset is not None and t.identity_items <= t.subset
        for t in cpu.tasks
    )
    said = sentences(diffs)
    assert (
        "loads.closed_loop.concurrency: registered [1, 2, 4, 8, 16, 32, 64]; here [1, 2, 4]"
        " (the small scale: the pass and stop bars' levels, so a knee above 4 users is not"
        " located)" in said
    )
    assert "recording.sessions: registered 3; here 1" in said
    assert "task 'gsm8k' uses: registered ['speed', 'accuracy', 'identity']" in said
    assert (
        "task 'humaneval': registered ['speed', 'accuracy', 'identity']; here not run (the"
        " small scale: the speed task 'chat' and the accuracy bar's tasks only)"
    ) in said
    # Identity items are said only for a task that has identity cells.
    assert (
        "task 'chat': registered max_tokens 512, every item(s), 32 identity items; here"
        " max_tokens 16, 3 items, 2 identity items (laptop size)" in said
    )
    assert (
        "task 'mmlu': registered max_tokens 512, every item(s); here max_tokens 16, 3 items"
        " (laptop size;" in said
    )


def test_the_generated_study_is_one_specbench_reads_back(tmp_path) -> None:
    cpu, diffs = rehearsal_study(registered(), PAIR, SMALL)
    text = study_yaml(cpu, diffs, Path("prereg.yaml"))
    assert text.startswith("# Generated by `specbench rehearse prereg.yaml`")
    assert Study.model_validate(yaml.safe_load(text)) == cpu
    assert sum(line.startswith("#  - ") for line in text.splitlines()) == len(diffs)


def test_what_the_cpu_build_cannot_run_is_left_out_with_its_reason() -> None:
    data = registered().model_dump(mode="json", by_alias=True, exclude_none=True)
    ngram = next(a for a in data["arms"] if a["name"] == "vllm-ngram")
    arms = [
        {
            **ngram,
            "name": "control",
            "drafter": {
                "method": "eagle3",
                "model": "x",
                "num_draft_tokens": 3,
                "synthetic": {"acceptance_length": 2.0},
            },
        },
        {
            **ngram,
            "name": "scheduled",
            "drafter": {**ngram["drafter"], "k_schedule": [[1, 4, 4], [5, None, 1]]},
        },
        {**ngram, "name": "mtp", "drafter": {"method": "mtp", "num_draft_tokens": 1}},
    ]
    data["arms"] += arms
    cpu, diffs = rehearsal_study(Study.model_validate(data), PAIR, FULL)
    assert "control" not in [a.name for a in cpu.arms] and "mtp" not in [a.name for a in cpu.arms]
    scheduled = cpu.arm("scheduled").drafter
    assert scheduled is not None and scheduled.k_schedule is None
    said = sentences(diffs)
    assert (
        "control arm (arm control): registered eagle3 with synthetic acceptance; here not run"
        " (vLLM 0.32's CPU build has no synthetic acceptance" in said
    )
    assert (
        "drafter.k_schedule (arm scheduled): registered [[1, 4, 4], [5, None, 1]]; here one k (4)"
        " (specbench has not verified" in said
    )
    assert "drafter (arm mtp): registered method mtp; here not run" in said


def test_rehearse_writes_the_study_and_lists_the_differences_without_running(tmp_path) -> None:
    proc = specbench(
        "rehearse",
        "prereg.yaml",
        "--small",
        "--no-run",
        "--pair",
        str(tmp_path / "pair"),
        "--results",
        str(tmp_path / "results"),
    )
    written = tmp_path / "results" / "prereg-rehearsal-small.yaml"
    assert f"rehearsal study: {written} (3 arms: vllm-base, vllm-eagle3, vllm-ngram)" in proc.stdout
    assert (
        "  - engine (arms sglang-dflash, sglang-base): registered sglang; here not run"
        in proc.stdout
    )
    assert (tmp_path / "pair" / "eagle3" / "config.json").exists()  # the pair, built
    assert not any(p.is_dir() for p in (tmp_path / "results").iterdir())  # nothing ran
    validated = specbench("validate", str(written), "--format", "json")
    assert json.loads(validated.stdout)["seal"]


def test_rehearse_hands_its_run_options_to_specbench_run(tmp_path, tiny_pair_dir) -> None:
    """--remeasure-invalid goes through to `specbench run`, which refuses it without
    --resume before anything starts (exit 2), as it does its own."""
    proc = specbench(
        "rehearse",
        "prereg.yaml",
        "--small",
        "--remeasure-invalid",
        "--pair",
        str(tiny_pair_dir),
        "--results",
        str(tmp_path / "results"),
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().startswith("specbench: --remeasure-invalid needs --resume [RUN]"), (
        proc.stderr
    )
    assert not any(p.is_dir() for p in (tmp_path / "results").iterdir())  # no run folder


def test_a_study_without_a_vllm_drafter_is_refused(tmp_path) -> None:
    data = registered().model_dump(mode="json", by_alias=True, exclude_none=True)
    data["arms"] = [a for a in data["arms"] if a["engine"] == "sglang" or "drafter" not in a]
    path = tmp_path / "sglang-only.yaml"
    path.write_text(yaml.safe_dump(data))
    proc = specbench(
        "rehearse",
        str(path),
        "--no-run",
        "--pair",
        str(tmp_path / "pair"),
        "--results",
        str(tmp_path / "r"),
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"specbench: {path}: no vLLM drafter arm of this study can run on the CPU build"
    )


def test_validate_refuses_ngram_gpu_on_the_cpu_build(tmp_path) -> None:
    """Tried: vLLM 0.32's CPU worker dies at start allocating pinned memory for it."""
    text = (
        Path("examples/cpu.yaml")
        .read_text(encoding="utf-8")
        .replace("      method: ngram\n", "      method: ngram_gpu\n", 1)
    )
    path = tmp_path / "cpu.yaml"
    path.write_text(text, encoding="utf-8")
    proc = specbench(
        "validate", str(path), check=False, env={"SPECBENCH_TINY_PAIR": "/models/pair"}
    )
    assert proc.returncode == 2
    (line,) = [ln for ln in proc.stderr.splitlines() if "drafter.method" in ln]
    assert "vLLM 0.32's CPU build cannot start ngram_gpu" in line and "pin_memory" in line
