"""SGLang, started as `python -m sglang.launch_server` with metrics on.

Flags checked against sgl-project/sglang: python/sglang/srt/server_args.py (the
argument parser) and python/sglang/srt/arg_groups/speculative_hook.py (what each
speculative algorithm does to the server args; every one of them -- EAGLE family,
NGRAM, DFLASH, Frozen-KV MTP -- sets max_running_requests to 48 when it is not
passed). The drafter's precision and the admission delay were read in the 0.5.23
wheel (python/sglang/srt/...):
- arg_groups/fields/spec.py:216 `--speculative-draft-model-quantization`, choices
  QUANTIZATION_CHOICES (arg_groups/choices.py:32, `unquant` at :65);
  arg_groups/serving_hook.py:676-709: unset, the draft takes the target's
  --quantization; `unquant` resolves to None, so the draft's ModelConfig reads the
  checkpoint's own quantization_config (configs/model_config.py:2000-).
- arg_groups/fields/schedule.py:273 `--min-free-slots-delay N`;
  managers/min_free_slots_delayer.py:4-22 resolves it and managers/scheduler.py:1225-1236
  applies it: unset, DFLASH and DSPARK (is_dflash_family) with max_running_requests >= 8
  hold new prefills until min(4, max(2, (max_running_requests + 5) // 6)) slots are free.
- speculative/spec_info.py `SpeculativeAlgorithm.create_worker`: DFLASH is always served
  by DFlashWorkerV2 ("V2 worker drives both overlap and non-overlap"); 0.5.23 ships no
  spec-v1 DFLASH worker (no speculative/dflash_worker.py, whose forward raised "DFLASH
  does not support return_logprob") and reads no SGLANG_ENABLE_SPEC_V2. The v2 worker
  returns logprobs: dflash_worker_v2.py:2951 calls layers/logprob_processor.py:386
  `compute_spec_logprobs`, which fills top_logprobs per committed token too.
- arg_groups/fields/spec.py:78 and speculative_hook.py:807-838: DSPARK takes
  `--speculative-dspark-block-size` gamma (tokens drafted) and sets
  --speculative-num-draft-tokens to the verify window gamma + 1 (a different one fails).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from harness.dialects import Dialect
from harness.engines.launch.base import EngineKind, int_option, option_value
from harness.engines.launch.chosen_settings import sglang_chosen

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
# Algorithms SGLang turns the admission delay on for by itself (is_dflash_family).
DFLASH_FAMILY = {"DFLASH", "DSPARK"}
# Drafters without weights of their own: no draft quantization to set.
WEIGHTLESS_ALGORITHMS = {"NGRAM"}
# What SGLang sets max_running_requests to for any speculative algorithm unless passed.
SPECULATIVE_RUNNING_CAP = 48
# drafter.quantization `checkpoint` in SGLang's spelling: no override, the checkpoint's own.
UNQUANT = "unquant"
# The worker SGLang 0.5.23 serves DFLASH with, in words (module docstring): the identity
# cells and the smoke ask for logprobs, which its old spec-v1 worker refused.
DFLASH_WORKER = (
    "DFlashWorkerV2, SGLang 0.5.23's only DFLASH worker (speculative/spec_info.py"
    " create_worker; nothing to switch on, no SGLANG_ENABLE_SPEC_V2): returns"
    " logprobs with their top alternatives (compute_spec_logprobs)"
)


def sglang_algorithm(arm: Arm) -> str | None:
    d = arm.drafter
    return None if d is None else SGLANG_ALGORITHMS.get(d.method.lower(), d.method.upper())


def speculative_args(arm: Arm) -> list[str]:
    """The --speculative-* flags for an arm (empty without a drafter).

    For chain drafters specbench's num_draft_tokens is k, the tokens drafted per
    round (vLLM's num_speculative_tokens), while SGLang's --speculative-num-draft-tokens
    counts the verify window, the k drafts plus the token they extend: k + 1. EAGLE
    chains also take --speculative-num-steps k with top-k 1. DFLASH's unit is its
    block, which is the verify window (a b16 DFlash draft: 16), passed as is. DSPARK
    takes gamma, the tokens it drafts, as --speculative-dspark-block-size k and sets
    the verify window to k + 1 itself. Each drafter option `key: value` becomes
    `--speculative-key value` and wins over these defaults (e.g. `eagle_topk: 4`,
    `num_draft_tokens: 10`, `ngram_max_trie_depth: 18`). A drafter with weights gets
    --speculative-draft-model-quantization: `unquant` for `checkpoint` (without the
    flag SGLang would quantize it like the target).
    """
    d = arm.drafter
    algorithm = sglang_algorithm(arm)
    if d is None or algorithm is None:
        return []
    flags: dict[str, Any] = {}
    if algorithm in EAGLE_FAMILY:
        flags["num_steps"] = d.num_draft_tokens
        flags["eagle_topk"] = 1
    if algorithm == "DFLASH":
        flags["num_draft_tokens"] = d.num_draft_tokens
    elif algorithm == "DSPARK":
        flags["dspark_block_size"] = d.num_draft_tokens
    else:
        flags["num_draft_tokens"] = d.num_draft_tokens + 1
    quantization = draft_quantization_flag(arm)
    if quantization is not None:
        flags["draft_model_quantization"] = quantization
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


def draft_quantization_flag(arm: Arm) -> str | None:
    """--speculative-draft-model-quantization's value (None: not passed, no draft weights)."""
    d = arm.drafter
    if d is None or sglang_algorithm(arm) in WEIGHTLESS_ALGORITHMS:
        return None
    return UNQUANT if d.quantization == "checkpoint" else d.quantization


def min_free_slots(
    algorithm: str | None, explicit: int | None, max_running: int | None
) -> int | None:
    """The free-slot threshold SGLang 0.5.23 holds new prefills for (None: off), as
    managers/min_free_slots_delayer.py resolves it; `max_running` is the engine's
    running-request cap (None: unknown, sized from memory)."""
    if explicit is not None:
        threshold = explicit if max_running is None else min(explicit, max_running)
        return threshold if threshold > 1 else None
    if algorithm in DFLASH_FAMILY and max_running is not None and max_running >= 8:
        return min(4, max(2, (max_running + 5) // 6))
    return None


class SglangKind(EngineKind):
    name: ClassVar[str] = "sglang"
    entry_point: ClassVar[tuple[str, ...]] = ("-m", "sglang.launch_server")
    display_name: ClassVar[str] = "SGLang"

    def speculation_gate(self, arm: Arm, up_to: int | None) -> str:
        # Not found for 0.5.23: the PRs that added a batch-size fallback to plain decode
        # (sgl-project/sglang 13376, 13804) were closed unmerged; 24055 (merged) adapts
        # speculative_num_steps to the batch, it does not switch drafting off.
        return (
            "SGLang 0.5.23: no batch-size switch-off for speculation; serve loads above"
            f" {up_to} users from a no-drafter deployment"
            if up_to is not None
            else "SGLang 0.5.23: speculation never paid here; serve this load without the drafter"
        )

    metrics_dialect: ClassVar[Dialect] = "sglang"
    engine_module: ClassVar[str] = "sglang"
    # `import sglang` succeeds where the server cannot start (its srt extras, sgl-kernel
    # or flashinfer missing): server_args imports what `sglang.launch_server` parses with.
    server_modules: ClassVar[tuple[str, ...]] = ("sglang.srt.server_args",)
    gpu: ClassVar[bool] = True
    expected_version: ClassVar[str | None] = "0.5.23"
    distribution: ClassVar[str | None] = "sglang"
    memory_fraction_flag: ClassVar[str | None] = "--mem-fraction-static"

    def synthetic_problem(self, arm: Arm) -> str | None:
        d = arm.drafter
        if d is not None and d.synthetic is not None and d.synthetic.rates is not None:
            return (
                "SGLang 0.5.23 takes a mean acceptance length only"
                " (SGLANG_SIMULATE_ACC_LEN), not per-position rates"
            )
        length = d.synthetic.acceptance_length if d is not None and d.synthetic else None
        if (
            d is not None
            and length is not None
            and sglang_algorithm(arm) == "DFLASH"
            and length > d.num_draft_tokens
        ):
            # speculative/dflash_utils.py:872-875 clamps it to [1, block_size]: the block is
            # the whole verify window, so a round commits at most k tokens, not k + 1.
            return (
                f"synthetic.acceptance_length {length:g} is above the DFLASH block size"
                f" k = {d.num_draft_tokens}: SGLang 0.5.23 clamps it to the block"
                " (dflash_utils.py), so a DFLASH round keeps at most k tokens"
            )
        return None

    def environment(self, arm: Arm) -> dict[str, str]:
        """A control arm's synthetic acceptance (SGLang 0.5.23, speculative/spec_utils.py
        and dflash_utils.py): each round keeps floor(L) or ceil(L) tokens, weighted to a
        mean of L (match-expected), of the real drafts (real-draft-token: without it the
        kept tokens are a fixed id, 100)."""
        env: dict[str, str] = {}
        d = arm.drafter
        if d is not None and d.synthetic is not None and d.synthetic.acceptance_length:
            env = {
                "SGLANG_SIMULATE_ACC_LEN": f"{d.synthetic.acceptance_length:g}",
                "SGLANG_SIMULATE_ACC_METHOD": "match-expected",
                "SGLANG_SIMULATE_ACC_TOKEN_MODE": "real-draft-token",
            }
        return {**env, **super().environment(arm)}

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
        return cmd + self.own_args(arm)

    def request_fields(self, arm: Arm, study: Study) -> dict[str, Any]:
        fields = super().request_fields(arm, study)
        fields["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
        if arm.drafter is not None and study.recording.per_request_spec_metrics:
            # sglext.spec_tokens_details on the final chunk.
            fields["return_spec_tokens_details"] = True
        return fields

    def drafter_precision(self, arm: Arm, study: Study) -> str:
        if arm.drafter is None or sglang_algorithm(arm) in WEIGHTLESS_ALGORITHMS:
            return "none (no draft weights)"
        # Read back from the flags as passed: an option or extra arg may override ours.
        flag = option_value(self.own_args(arm), "--speculative-draft-model-quantization")
        if flag is None:
            return (
                f"the target's ({study.model.quantization or 'none'}):"
                " --speculative-draft-model-quantization is not passed"
            )
        if flag == UNQUANT:
            return (
                "checkpoint's own (--speculative-draft-model-quantization unquant; unset,"
                " SGLang gives the draft the target's"
                f" --quantization {study.model.quantization or '(none)'})"
            )
        return f"{flag} (--speculative-draft-model-quantization {flag})"

    def resolved_settings(self, arm: Arm, study: Study) -> dict[str, str]:
        settings = super().resolved_settings(arm, study)
        if sglang_algorithm(arm) == "DFLASH":
            settings["speculative_worker"] = DFLASH_WORKER
        settings["min_free_slots_delay"] = self.admission_delay(arm)
        return settings

    def chosen_settings(self, arm: Arm, log: list[str], command: list[str]) -> dict[str, str]:
        return sglang_chosen(log)

    def admission_threshold(self, arm: Arm) -> int | None:
        """Free slots SGLang waits for before admitting new requests (None: off)."""
        explicit = int_option(self.own_args(arm), "--min-free-slots-delay")
        return min_free_slots(sglang_algorithm(arm), explicit, self.effective_max_running(arm))

    def admission_delay(self, arm: Arm) -> str:
        """The admission delay in words, and where its value comes from."""
        explicit = option_value(self.own_args(arm), "--min-free-slots-delay")
        cap = self.effective_max_running(arm)
        threshold = self.admission_threshold(arm)
        state = "off" if threshold is None else f"{threshold} free slots"
        if explicit is not None:
            return f"{state} (--min-free-slots-delay {explicit})"
        if sglang_algorithm(arm) in DFLASH_FAMILY:
            if cap is None:
                return (
                    "on: SGLang's DFLASH/DSPARK default, from max_running_requests"
                    " (not passed; the cap is sized from memory)"
                )
            return f"{state} (not passed: SGLang's own DFLASH/DSPARK default at {cap} running)"
        return f"{state} (not passed: SGLang's default)"

    def own_args(self, arm: Arm) -> list[str]:
        """The flags this arm adds after the model's (the arm's extra args last, winning)."""
        args = []
        if arm.min_free_slots_delay is not None:
            args += ["--min-free-slots-delay", str(arm.min_free_slots_delay)]
        args += speculative_args(arm)
        dtype = self.dtype_for(arm)
        if dtype is not None:
            args += ["--dtype", dtype]
        return args + (list(arm.launch.extra_args) if arm.launch is not None else [])

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
