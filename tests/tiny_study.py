"""The tiny model's study and the vLLM CPU engine's arms, shared by the engine tests and
tests/conftest.py's fixtures (a module of its own: a test imports it as `tests.tiny_study`,
where `from conftest import ...` would name the conftest module twice)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.prereg.schema import Study

# Flags for the CPU engine serving the tiny model (ENGINES.md): eager mode starts
# in ~25 s instead of ~45 s. The dtype is the demo's `launch.dtype: cpu_native`
# (harness/engines/launch/cpu_dtype.py: bfloat16 with AVX-512, float16 with AMX, float32 on AVX2
# alone). A fixed bfloat16 ran on torch's slow fallback on an AVX2-only host, and with an
# AVX-512 host held to AVX2 (ONEDNN_MAX_CPU_ISA) vLLM's engine core died on it.
VLLM_CPU_EXTRA_ARGS = ["--enforce-eager"]
VLLM_CPU_DTYPE = "cpu_native"
VLLM_CPU_ENV = {"HF_HUB_OFFLINE": "1"}  # the kind adds VLLM_TARGET_DEVICE and the CPU settings
VLLM_CPU_STARTUP_TIMEOUT_S = 900.0  # generous: the machine is shared and slow
TINY_SERVED_NAME = "tiny"


def tiny_study(model_dir: Path | str, arms: list[dict[str, Any]], **model: Any) -> Study:
    """A minimal valid Study around the tiny model with the given arm mappings."""
    return Study.model_validate(
        {
            "title": "specbench engine tests",
            "registered": "2026-11-30",
            "hardware": {"gpu": "none (CPU)", "memory_bandwidth_gb_s": 20, "dense_tflops": 0.5},
            "model": {
                "id": str(model_dir),
                "served_name": TINY_SERVED_NAME,
                "params_billion": 0.001,
                "weight_bytes_per_param": 4.0,
                "max_model_len": 1024,
                **model,
            },
            "arms": arms,
            "loads": {"closed_loop": {"concurrency": [1, 2, 4, 8]}},
            "tasks": [{"name": "chat", "kind": "chat", "uses": ["speed"], "max_tokens": 64}],
            "recording": {"sessions": 1},  # an engine test, not a study's intervals
            "bars": {
                "pass": {"speed": {"concurrencies": [1]}, "identity": None},
                "stop": {"concurrencies": [1]},
            },
        }
    )


def vllm_cpu_launch(python: str, **overrides: Any) -> dict[str, Any]:
    return {
        "python": python,
        "env": dict(VLLM_CPU_ENV),
        "extra_args": list(VLLM_CPU_EXTRA_ARGS),
        "dtype": VLLM_CPU_DTYPE,
        "startup_timeout_s": VLLM_CPU_STARTUP_TIMEOUT_S,
        "stop_grace_s": 20.0,
        **overrides,
    }


def vllm_cpu_arms(python: str, model_dir: Path | str) -> list[dict[str, Any]]:
    """The shared arms: no drafter, n-gram k=3, and the target as its own draft."""
    launch = vllm_cpu_launch(python)
    return [
        {"name": "nodrafter", "engine": "vllm-cpu", "launch": launch, "max_running_requests": 8},
        {
            "name": "ngram",
            "engine": "vllm-cpu",
            "launch": launch,
            "max_running_requests": 8,
            "baseline": "nodrafter",
            "drafter": {
                "method": "ngram",
                "num_draft_tokens": 3,
                "options": {"prompt_lookup_max": 4, "prompt_lookup_min": 2},
            },
        },
        {
            "name": "draft-self",
            "engine": "vllm-cpu",
            "launch": launch,
            "max_running_requests": 8,
            "baseline": "nodrafter",
            "drafter": {"method": "draft_model", "model": str(model_dir), "num_draft_tokens": 3},
        },
    ]
