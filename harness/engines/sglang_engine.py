"""SGLang, started as `python -m sglang.launch_server` with metrics on.

Flags checked against sgl-project/sglang: python/sglang/srt/server_args.py (the
argument parser) and python/sglang/srt/arg_groups/speculative_hook.py (what each
speculative algorithm does to the server args; every one of them -- EAGLE family,
NGRAM, DFLASH, Frozen-KV MTP -- sets max_running_requests to 48 when it is not
passed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

from harness.engines.base import EngineKind, int_option

if TYPE_CHECKING:
    from harness.prereg.schema import Arm, Study

# specbench spelling -> SGLang's --speculative-algorithm. Unknown methods are
# upper-cased and passed through (SGLang upper-cases too, then rejects unknown
# names at start: "Unknown speculative algorithm name").
SGLANG_ALGORITHMS = {
    "eagle": "EAGLE",
    "eagle3": "EAGLE3",
    "mtp": "NEXTN",  # SGLang's name for the target's own MTP head (an EAGLE variant)
    "nextn": "NEXTN",
    "standalone": "STANDALONE",
    "draft_model": "STANDALONE",
    "ngram": "NGRAM",
    "dflash": "DFLASH",
    "dspark": "DSPARK",
}
EAGLE_FAMILY = {"EAGLE", "EAGLE3", "NEXTN", "STANDALONE"}
BLOCK_DRAFTERS = {"DFLASH", "DSPARK"}
# What SGLang sets max_running_requests to for any speculative algorithm unless passed.
SPECULATIVE_RUNNING_CAP = 48


def speculative_args(arm: Arm) -> list[str]:
    """The --speculative-* flags for an arm (empty without a drafter).

    For chain drafters specbench's num_draft_tokens is k, the tokens drafted per
    round (vLLM's num_speculative_tokens), while SGLang's --speculative-num-draft-tokens
    counts the verify window, the k drafts plus the token they extend: k + 1. EAGLE
    chains also take --speculative-num-steps k with top-k 1. For block drafters
    (DFLASH, DSPARK) num_draft_tokens is the block size, which is SGLang's own unit
    (a b16 DFlash draft: 16). Each drafter option `key: value` becomes
    `--speculative-key value` and wins over these defaults (e.g. `eagle_topk: 4`,
    `num_draft_tokens: 10`, `ngram_max_trie_depth: 18`).
    """
    d = arm.drafter
    if d is None:
        return []
    algorithm = SGLANG_ALGORITHMS.get(d.method.lower(), d.method.upper())
    flags: dict[str, Any] = {}
    if algorithm in EAGLE_FAMILY:
        flags["num_steps"] = d.num_draft_tokens
        flags["eagle_topk"] = 1
    if algorithm in BLOCK_DRAFTERS:
        flags["num_draft_tokens"] = d.num_draft_tokens
    else:
        flags["num_draft_tokens"] = d.num_draft_tokens + 1
    flags.update(d.options)
    args = ["--speculative-algorithm", algorithm]
    if d.model is not None:
        args += ["--speculative-draft-model-path", d.model]
    if d.revision is not None:
        args += ["--speculative-draft-model-revision", d.revision]
    for key, value in flags.items():
        flag = "--speculative-" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value is False or value is None:
            continue
        else:
            args += [flag, str(value)]
    return args


class SglangKind(EngineKind):
    name: ClassVar[str] = "sglang"
    metrics_dialect: ClassVar[Literal["vllm", "sglang"]] = "sglang"
    engine_module: ClassVar[str] = "sglang"
    gpu: ClassVar[bool] = True
    expected_version: ClassVar[str | None] = "0.5.23"

    def prefix(self, arm: Arm) -> list[str]:
        launch = arm.launch
        if launch is not None and launch.command:
            return list(launch.command)
        python = self.interpreter(arm)
        if python is None:
            raise ValueError(f"arm {arm.name!r}: launch needs python or command for SGLang")
        return [python, "-m", "sglang.launch_server"]

    def command(self, arm: Arm, study: Study, host: str, port: int) -> list[str]:
        model = study.model
        cmd = [*self.prefix(arm), "--model-path", model.id, "--host", host, "--port", str(port)]
        cmd += ["--served-model-name", self.served_model(study), "--enable-metrics"]
        if model.revision is not None:
            cmd += ["--revision", model.revision]
        if model.quantization is not None:
            cmd += ["--quantization", model.quantization]
        if model.max_model_len is not None:
            cmd += ["--context-length", str(model.max_model_len)]
        cmd += ["--random-seed", str(study.sampling.seed)]
        if arm.max_running_requests is not None:
            cmd += ["--max-running-requests", str(arm.max_running_requests)]
        cmd += speculative_args(arm)
        cmd += list(arm.launch.extra_args) if arm.launch is not None else []
        return cmd

    def request_fields(self, arm: Arm, study: Study) -> dict[str, Any]:
        fields = super().request_fields(arm, study)
        fields["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
        if arm.drafter is not None and study.recording.per_request_spec_metrics:
            # sglext.spec_tokens_details on the final chunk.
            fields["return_spec_tokens_details"] = True
        return fields

    def effective_max_running(self, arm: Arm) -> int | None:
        extra = arm.launch.extra_args if arm.launch is not None else []
        explicit = int_option(list(extra), "--max-running-requests")
        if explicit is not None:
            return explicit
        if arm.max_running_requests is not None:
            return arm.max_running_requests
        if arm.drafter is not None:
            return SPECULATIVE_RUNNING_CAP
        return None  # sized from KV memory at start

    def version_command(self, arm: Arm) -> list[str]:
        launch = arm.launch
        if launch is not None and launch.command and self.interpreter(arm) is None:
            # A python-like first word is the interpreter; otherwise nothing to ask.
            first = launch.command[0]
            if first.rsplit("/", 1)[-1].startswith("python"):
                return self.probe_command(first)
            raise ValueError(
                f"arm {arm.name!r}: set launch.python (not only command) so the SGLang "
                "version can be checked"
            )
        return super().version_command(arm)
