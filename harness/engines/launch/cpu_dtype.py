"""Which dtype keeps a CPU engine's step memory-bound on this host, and why.

vLLM's CPU build runs every unquantized linear layer through oneDNN
(`vllm/model_executor/layers/utils.py: dispatch_cpu_unquantized_gemm`). oneDNN builds a
bfloat16 matmul only from AVX-512 (its `avx512_core` ISA: F, BW, VL and DQ) up; on an
AVX2-only host (an AMD EPYC of this project's machines) creating one fails and vLLM falls
back to torch's bfloat16 linear, which converts in scalar code and runs at ~8 GFLOP/s
whatever the batch: a step at two users then costs twice a step at one, and speculation
cannot pay (measured: benchmarks/README.md, "The demo's model pair"). float32 is native on
every x86-64 host with AVX2 (FMA), so there the demo serves float32.

A host with AMX (Intel Xeon from Sapphire Rapids on) runs bfloat16 on its tiles (oneDNN's
`avx512_core_amx` matmul; vLLM's AMX attention, `cpu_attn.py`, which it picks for bfloat16
alone): a plain step of the demo's target stays flat to 16 users (x1.16) and grows x1.55 at
32, and the draft-model arm still ran 1.25x at 32 users, so no knee was inside the demo's
levels (benchmarks/README.md, "AMX"). float16 takes no AMX path on a CPU without AMX-FP16
(vLLM's AMX GEMM asks for `amx_fp16`; measured: its step x1.45 at 16 users and x2.2 at 32,
AVX-512 FP16's compute with bfloat16's bytes), so there the demo serves float16; where the
CPU has AMX-FP16 or no AVX-512 FP16, float32 (AVX-512, no AMX path either).

`ONEDNN_MAX_CPU_ISA` in the engine's environment caps oneDNN below what the CPU has (how
an AVX-512 host is held to AVX2 kernels, with `ATEN_CPU_CAPABILITY=avx2`): the choice
follows the cap.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# oneDNN's avx512_core: what its bfloat16 matmul needs at least (cpu_isa_traits.hpp).
AVX512_CORE_FLAGS = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"})
# AMX's bfloat16 tiles (torch.cpu._is_amx_tile_supported, which vLLM asks).
AMX_FLAGS = frozenset({"amx_tile", "amx_bf16"})
# ONEDNN_MAX_CPU_ISA values (oneDNN's dnnl_cpu_isa names) that allow avx512_core.
_ISA_CAPS_WITH_AVX512_CORE = ("AVX512_CORE", "AVX10", "ALL", "DEFAULT")


@dataclass(frozen=True)
class CpuDtype:
    """The dtype a CPU engine should serve the demo's pair in on this host."""

    dtype: str  # "bfloat16", "float16" or "float32"
    isa: str  # "avx512_core", "avx512_amx", "avx2" or "older"
    why: str

    def as_record(self) -> dict[str, str]:
        return {"dtype": self.dtype, "isa": self.isa, "why": self.why}


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The first processor's flags (every core of a VM shows the same)."""
    try:
        with open(cpuinfo, encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def _cap_allows_avx512(cap: str | None) -> bool:
    if not cap:
        return True
    return cap.strip().upper().startswith(_ISA_CAPS_WITH_AVX512_CORE)


def choose_cpu_dtype(
    flags: frozenset[str] | set[str], env: Mapping[str, str] | None = None
) -> CpuDtype:
    """bfloat16 where oneDNN builds a bfloat16 matmul on AVX-512, float16 (or float32)
    where bfloat16 would run on AMX, float32 elsewhere."""
    env = {} if env is None else env
    cap = env.get("ONEDNN_MAX_CPU_ISA")
    has_avx512 = AVX512_CORE_FLAGS <= set(flags)
    if has_avx512 and _cap_allows_avx512(cap) and AMX_FLAGS <= set(flags):
        if "avx512_fp16" in flags and "amx_fp16" not in flags:
            return CpuDtype(
                "float16",
                "avx512_amx",
                "AMX runs bfloat16 matmuls on tiles, so a step stays memory-bound"
                " far past the demo's levels; float16 has no AMX path without"
                " AMX-FP16 and runs on AVX-512 FP16 with bfloat16's bytes",
            )
        return CpuDtype(
            "float32",
            "avx512_amx",
            "AMX runs bfloat16 (and here float16) matmuls on tiles, so a step"
            " stays memory-bound far past the demo's levels; float32 runs on"
            " AVX-512",
        )
    if has_avx512 and _cap_allows_avx512(cap):
        return CpuDtype(
            "bfloat16",
            "avx512_core",
            "AVX-512 (F, BW, VL, DQ): oneDNN builds a bfloat16 matmul, half the"
            " weight bytes of float32",
        )
    if has_avx512:
        return CpuDtype(
            "float32",
            "avx2",
            f"ONEDNN_MAX_CPU_ISA={cap} holds oneDNN below AVX-512: no bfloat16"
            " matmul, so vLLM's bfloat16 linear falls back to torch's"
            " compute-bound one; float32 is native",
        )
    isa = "avx2" if {"avx2", "fma"} <= set(flags) else "older"
    return CpuDtype(
        "float32",
        isa,
        "no AVX-512: oneDNN builds no bfloat16 matmul, so vLLM's bfloat16 linear"
        " falls back to torch's compute-bound one (~8 GFLOP/s at any batch);"
        " float32 is native",
    )


def host_cpu_dtype(env: Mapping[str, str] | None = None) -> CpuDtype:
    """The choice for this host, under `env` (default: this process's environment)."""
    import os

    return choose_cpu_dtype(cpu_flags(), os.environ if env is None else env)
