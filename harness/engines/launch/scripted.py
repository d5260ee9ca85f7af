"""The scripted test engine as an engine kind: dry runs of a whole study without a GPU.

The arm carries the declared model (`Arm.scripted`); the engine is this package's own
`python -m harness.testengine`, so it needs no separate environment.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, ClassVar

from harness.dialects import Dialect
from harness.engines.launch.base import EngineKind

if TYPE_CHECKING:
    from harness.prereg.schema import Arm, Study
    from harness.testengine.spec import ScriptedEngineSpec


# Mixed into a control arm's text: drafts kept whatever they say are not the target's words.
SYNTHETIC_SALT = 7919


def conditional_rates(unconditional: list[float]) -> list[float]:
    """The chance position i is kept given every earlier one was, from the chance the
    first i + 1 are all kept (vLLM's unconditional_to_conditional_rates)."""
    out, before = [], 1.0
    for rate in unconditional:
        out.append(rate / before if before > 0 else 0.0)
        before = rate
    return out


class ScriptedKind(EngineKind):
    name: ClassVar[str] = "scripted"
    # The class default; an arm's spec may choose "sglang" (see dialect_for).
    metrics_dialect: ClassVar[Dialect] = "vllm"
    engine_module: ClassVar[str] = "harness.testengine"
    expected_version: ClassVar[str | None] = None
    scripted_spec: ClassVar[bool] = True

    @staticmethod
    def spec(arm: Arm) -> ScriptedEngineSpec:
        if arm.scripted is None:
            raise ValueError(f"arm {arm.name!r}: engine 'scripted' needs a scripted spec")
        spec = arm.scripted
        if arm.max_running_requests is not None:
            spec = spec.model_copy(update={"max_batch": arm.max_running_requests})
        d = arm.drafter
        if d is not None and d.synthetic is not None:
            # The declared synthetic mode, as vLLM's: drafts kept by the registered chances
            # (conditional per position, what accept_probs declares), whatever they say,
            # so the text is not the target's (a salt of its own).
            spec = spec.model_copy(
                update={
                    "num_draft_tokens": d.num_draft_tokens,
                    "accept_probs": conditional_rates(
                        d.synthetic.unconditional_rates(d.num_draft_tokens)
                    ),
                    "output_salt": spec.output_salt + SYNTHETIC_SALT,
                }
            )
        if d is not None and d.k_schedule is not None:
            spec = spec.model_copy(update={"k_schedule": list(d.k_schedule)})
        return spec

    def synthetic_problem(self, arm: Arm) -> str | None:
        return None

    def k_schedule_problem(self, arm: Arm) -> str | None:
        return None  # the spec's k_schedule: k chosen per step by the running batch

    def k_schedule_setting(self, arm: Arm, ranges: list[tuple[int, int | None, int]]) -> str:
        entries = ", ".join(
            f"[{lo}, {hi if hi is not None else 'null'}, {k}]" for lo, hi, k in ranges
        )
        return f"scripted: drafter.k_schedule [{entries}] (the spec's k_schedule)"

    def drafter_precision(self, arm: Arm, study: Study) -> str:
        return "none (declared by the scripted spec; no weights)"

    def dialect_for(self, arm: Arm) -> Dialect:
        """The /metrics dialect this arm's scripted engine speaks."""
        return self.spec(arm).metrics_dialect

    def interpreter(self, arm: Arm) -> str | None:
        python = super().interpreter(arm)
        return python or sys.executable

    def command(self, arm: Arm, study: Study, host: str, port: int) -> list[str]:
        launch = arm.launch
        prefix = (
            list(launch.command)
            if launch is not None and launch.command
            else [self.interpreter(arm), "-m", "harness.testengine"]
        )
        spec = self.spec(arm)
        if not study.recording.per_request_spec_metrics and spec.metrics_dialect == "vllm":
            # As vLLM without --per-request-spec-decode-metrics: no per-request figures.
            spec = spec.model_copy(update={"per_request_spec_metrics": False})
        cmd = [
            *prefix,
            "--host",
            host,
            "--port",
            str(port),
            "--spec-json",
            spec.model_dump_json(),
            "--served-model-name",
            self.served_model(study),
        ]
        return cmd + (list(launch.extra_args) if launch is not None else [])

    def request_fields(self, arm: Arm, study: Study) -> dict[str, Any]:
        fields = super().request_fields(arm, study)
        fields["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
        if (
            self.dialect_for(arm) == "sglang"
            and arm.drafter is not None
            and study.recording.per_request_spec_metrics
        ):
            fields["return_spec_tokens_details"] = True  # as SglangKind asks
        return fields

    def effective_max_running(self, arm: Arm) -> int | None:
        return self.spec(arm).max_batch
