"""What a study runs on: the hardware and the target model."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from harness.prereg.schema.base import Positive, PositiveInt, Strict


class Hardware(Strict):
    """The hardware the study is registered for, with the published figures the
    plan's roofline estimate uses."""

    gpu: str = Field(
        description="The GPU model the study is registered for (e.g."
        " `H100-PCIe-80GB`); `specbench doctor` fails a host whose GPUs do not"
        " match it."
    )
    count: PositiveInt = Field(
        1, description="GPUs per engine; doctor checks the host has this many of `gpu`."
    )
    memory_bandwidth_gb_s: Positive = Field(
        description="Published memory (HBM) bandwidth in GB/s: the roofline's memory term in"
        " the plan's estimate and the predicted speedups."
    )
    dense_tflops: Positive = Field(
        description="Published dense tensor throughput in TFLOP/s at the model's precision:"
        " the roofline's compute term."
    )
    notes: str | None = Field(None, description="Free text shown with the hardware.")


class ModelSpec(Strict):
    """The target model every arm serves."""

    id: str = Field(description="The target model: a hub id or a local path.")
    revision: str | None = Field(
        None,
        description="The hub commit the model is read at; only a 40-hex sha pins it"
        " (`validate` lists a branch, or none, as not pinned). null: the"
        " hub's default branch; leave it null only for a local path.",
    )
    served_name: str | None = Field(
        None,
        description="The model name requests use (the engine's served model name); null: `id`.",
    )
    quantization: str | None = Field(
        None,
        description="The engine's --quantization for the target (e.g. `fp8`); null:"
        " the checkpoint's own.",
    )
    params_billion: Positive = Field(
        description="Parameters, in billions: the weight bytes in the plan's roofline."
    )
    weight_bytes_per_param: Positive = Field(
        2.0,
        description="Bytes per weight (2 for BF16, 1 for FP8): the bytes a step reads in"
        " the plan's roofline, and the checkpoint's size in doctor's checks.",
    )
    max_model_len: PositiveInt | None = Field(
        None,
        description="The engine's context length in tokens (vLLM --max-model-len,"
        " SGLang --context-length); null: the engine's default.",
    )
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=lambda: {"enable_thinking": False},
        description="Sent with every chat request as `chat_template_kwargs` (the default"
        " turns Qwen3's thinking off); empty: none sent.",
    )

    @property
    def request_name(self) -> str:
        return self.served_name or self.id
