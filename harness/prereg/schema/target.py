"""What a study runs on: the hardware and the target model."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from harness.prereg.schema.base import Positive, PositiveInt, Strict


class Hardware(Strict):
    """The hardware the study is registered for, with the published figures the
    plan's roofline estimate uses."""

    gpu: str
    count: PositiveInt = 1
    memory_bandwidth_gb_s: Positive  # published HBM bandwidth
    dense_tflops: Positive  # published dense tensor throughput at the model's precision
    notes: str | None = None


class ModelSpec(Strict):
    id: str  # hub id or local path
    revision: str | None = None  # pinned commit; None only for local paths
    served_name: str | None = None  # name requests use; defaults to id
    quantization: str | None = None
    params_billion: Positive
    weight_bytes_per_param: Positive = 2.0
    max_model_len: PositiveInt | None = None
    chat_template_kwargs: dict[str, Any] = Field(default_factory=lambda: {"enable_thinking": False})

    @property
    def request_name(self) -> str:
        return self.served_name or self.id
