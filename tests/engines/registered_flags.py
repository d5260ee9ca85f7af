"""sglang-base's launch flags as prereg.yaml registers them (the revision the study's own),
for the tests that check an SGLang line printed or started from that arm."""

from __future__ import annotations

from pathlib import Path

from harness.prereg import load_study

PREREG = Path(__file__).resolve().parents[2] / "prereg.yaml"
# After any drafter's flags: SGLang's memory share and the prefix cache off.
SGLANG_TAIL = ["--mem-fraction-static", "0.85", "--disable-radix-cache"]


def sglang_flags(port: int) -> list[str]:
    """The registered target's flags, serving on `port`, before any drafter's."""
    rev = load_study(PREREG).model.revision
    assert rev is not None  # pinned
    return [
        "--model-path",
        "Qwen/Qwen3-8B-FP8",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--served-model-name",
        "qwen3-8b-fp8",
        "--enable-metrics",
        "--revision",
        rev,
        "--quantization",
        "fp8",
        "--context-length",
        "8192",
        "--random-seed",
        "0",
        "--max-running-requests",
        "64",
        "--min-free-slots-delay",
        "1",
    ]
