"""Settings an engine chooses by itself at start, read from its startup log (issue 29).

A registered arm fixes its flags; the engine still decides some things per arm, and a
drafter whose engine decided differently from its baseline's measures that decision too.
vLLM 0.32 switches async scheduling (the CPU/GPU overlap) off for `method: ngram` and
keeps it for the baseline, EAGLE-3 and `ngram_gpu` (vllm/config/vllm.py: "Async scheduling
not supported with ngram-based speculative decoding and will be disabled"), and its CPU
platform turns it off for every arm (vllm/platforms/cpu.py). The settings are read from
the lines the engine logs, or named as its documented default where it logs nothing, and
kept in each engine start's `settings` beside the ones specbench resolves itself.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

# vLLM 0.32, config/vllm.py: every line that disables async scheduling it was not told about.
_VLLM_ASYNC_OFF = re.compile(
    r"Async scheduling (?:not supported with .*|is not compatible with .*|will be disabled .*"
    r"|is disabled .*)"
)
_VLLM_CONFIG = re.compile(r"Initializing a V1 LLM engine \(v[^)]*\) with config: (.*)")
_CUDAGRAPH_MODE = re.compile(r"'cudagraph_mode': <CUDAGraphMode\.(\w+)")
_CAPTURE_SIZES = re.compile(r"'cudagraph_capture_sizes': \[([^\]]*)\]")
_FLAG = re.compile(r"\b(enable_prefix_caching|enable_chunked_prefill)=(True|False)")
# SGLang logs its arguments once at start. 0.5.23: `server_args={...}`, the dict of
# ServerArgs.resolved_dict() (entrypoints/engine.py:173-174, 1185), whose decode graph cap
# is cuda_graph_config['decode']['max_bs'] (the flag is --cuda-graph-max-bs-decode,
# arg_groups/fields/exec_.py:629). Older releases: `server_args=ServerArgs(k=v, ...)`.
_SGLANG_DICT = re.compile(r"server_args=(\{.*\})")
_SGLANG_ARGS = re.compile(r"server_args=ServerArgs\((.*)\)")
_SGLANG_FIELD = re.compile(
    r"\b(disable_overlap_schedule|cuda_graph_max_bs|disable_cuda_graph"
    r"|speculative_algorithm)=([^,)]+)"
)

# The setting names, as the manifest keeps them and the verdict page compares them.
ENGINE_CHOSEN = (
    "async_scheduling",
    "cuda_graphs",
    "cascade_attention",
    "prefix_caching",
    "chunked_prefill",
    "overlap_schedule",
    "cuda_graph_max_bs",
)


def _clean(line: str) -> str:
    """A log line without vLLM's `(Process pid=N) LEVEL date [file:line]` prefix."""
    return re.sub(r"^\(\w+ pid=\d+\)\s+\w+\s+\S+\s+\S+\s+\[[^\]]*\]\s*", "", line).strip()


def vllm_chosen(log: Iterable[str], command: list[str], cpu: bool) -> dict[str, str]:
    """What a vLLM 0.32 engine chose, from its startup log and its command line."""
    lines = list(log)
    out: dict[str, str] = {}
    off = next((_clean(line) for line in lines if _VLLM_ASYNC_OFF.search(line)), None)
    if "--no-async-scheduling" in command:
        out["async_scheduling"] = "off (--no-async-scheduling)"
    elif cpu:
        # The platform hook runs last and switches it off whatever the drafter.
        out["async_scheduling"] = "off (vLLM's CPU platform turns it off for every arm)"
    elif "--async-scheduling" in command:
        out["async_scheduling"] = "on (--async-scheduling)"
    elif off is not None:
        out["async_scheduling"] = f"off (engine log: {off})"
    else:
        out["async_scheduling"] = "on (vLLM's default; no startup line turned it off)"
    config = next((m.group(1) for line in lines if (m := _VLLM_CONFIG.search(line))), None)
    if config is not None:
        mode = _CUDAGRAPH_MODE.search(config)
        sizes = _CAPTURE_SIZES.search(config)
        if mode is not None:
            # The mode is the setting; the sizes are token counts, n x (k + 1) for a drafter
            # (config/vllm.py:2341-2440), so they differ from its baseline's by design.
            sizes_list = (
                [s.strip() for s in sizes.group(1).split(",") if s.strip()] if sizes else []
            )
            out["cuda_graphs"] = f"{mode.group(1)} (" + (
                f"{len(sizes_list)} capture sizes {sizes_list[0]}-{sizes_list[-1]} tokens)"
                if sizes_list
                else "no capture sizes)"
            )
        for name, value in _FLAG.findall(config):
            key = name.removeprefix("enable_")
            out[key] = "on" if value == "True" else "off"
    if not cpu:  # config/model.py:312-314: the flag is deprecated and does nothing
        out["cascade_attention"] = (
            "off (removed in vLLM 0.32: --[no-]disable-cascade-attn has no effect)"
        )
    return out


def _sglang_fields(lines: list[str]) -> dict[str, str] | None:
    """The logged server_args' fields that matter here, as text (None: none logged)."""
    for line in lines:
        if (m := _SGLANG_DICT.search(line)) is not None:
            try:
                args = ast.literal_eval(m.group(1))
            except (ValueError, SyntaxError):
                continue
            decode = (args.get("cuda_graph_config") or {}).get("decode") or {}
            cap = decode.get("max_bs") or args.get("cuda_graph_max_bs_decode")
            off = args.get("disable_cuda_graph") or decode.get("backend") == "disabled"
            return {
                k: str(v)
                for k, v in [*args.items(), ("cuda_graph_max_bs", cap), ("disable_cuda_graph", off)]
                if v is not None
            }
    args = next((m.group(1) for line in lines if (m := _SGLANG_ARGS.search(line))), None)
    return None if args is None else dict(_SGLANG_FIELD.findall(args))


def sglang_chosen(log: Iterable[str]) -> dict[str, str]:
    """What an SGLang engine chose, from the resolved `server_args` it logs at start."""
    fields = _sglang_fields(list(log))
    if fields is None:
        return {}
    out: dict[str, str] = {}
    if "disable_overlap_schedule" in fields:
        out["overlap_schedule"] = (
            "off" if fields["disable_overlap_schedule"] == "True" else "on"
        ) + " (server_args)"
    if fields.get("disable_cuda_graph") == "True":
        out["cuda_graphs"] = "off (server_args)"
    if "cuda_graph_max_bs" in fields:
        out["cuda_graph_max_bs"] = f"{fields['cuda_graph_max_bs']} (server_args)"
    return out


def differences(drafter: dict[str, str], baseline: dict[str, str]) -> list[str]:
    """Each engine-chosen setting whose state differs between a drafter and its baseline."""

    def state(v: str | None) -> str | None:
        return None if v is None else v.split(" (")[0]

    return [
        f"{name}: {drafter.get(name, 'not read')} vs baseline {baseline.get(name, 'not read')}"
        for name in ENGINE_CHOSEN
        if state(drafter.get(name)) != state(baseline.get(name))
        and (name in drafter or name in baseline)
    ]
