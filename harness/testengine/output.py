"""What the scripted engine sends for a request's tokens: their ids and logprobs as the
spec scripts them, and the per-request figures and closing events that end a stream."""

from __future__ import annotations

import math

from harness.testengine import chunks
from harness.testengine.sequence import Sequence
from harness.testengine.spec import ScriptedEngineSpec
from harness.testengine.tokens import WORDS, candidates, logprob_fields

# How far below the runner-up further alternatives sit (top_logprobs > 2): well clear of
# both candidates, so they never change a margin.
_FAR_BELOW = 20.0


def output_ids(spec: ScriptedEngineSpec, seq: Sequence, n: int) -> list[int]:
    """The tokens at positions [generated - n, generated): a function of the prompt
    (and the spec's output_salt, split_char_at_token and flip_at_token) and the
    position only, so like greedy decoding the text does not depend on drafting,
    batching or which attempt it is (identity cells can compare arms)."""
    first = seq.generated - n
    key = seq.prompt_key ^ spec.output_salt  # salt 0: the prompt's own words
    # This arm keeps the runner-up at flip_at_token (output positions are 1-based).
    return [
        candidates(key, i, spec.split_char_at_token)[int(i + 1 == spec.flip_at_token)]
        for i in range(first, first + n)
    ]


def output_scores(spec: ScriptedEngineSpec, seq: Sequence, n: int) -> list[dict]:
    """The `logprobs.content` entries of the tokens at [generated - n, generated): the
    target's top-1 and runner-up with the spec's margin there, as this arm reports
    them (see ScriptedEngineSpec.flip_at_token)."""
    first = seq.generated - n
    key = seq.prompt_key ^ spec.output_salt
    out = []
    for i in range(first, first + n):
        position = i + 1
        top, runner = candidates(key, i, spec.split_char_at_token)
        margin = spec.tie_margin if position == spec.tie_at_token else spec.logprob_margin
        # Two-way log-softmax: the pair is a distribution and the margin is exact.
        top_lp = -math.log1p(math.exp(-margin))
        runner_lp = top_lp - margin
        ranked, token, logprob = [(top, top_lp), (runner, runner_lp)], top, top_lp
        if position == spec.flip_at_token:
            token = runner
            if position == spec.tie_at_token:
                # Numerics: its own kernels ranked the two the other way round.
                ranked, logprob = [(runner, top_lp), (top, runner_lp)], top_lp
            else:
                logprob = runner_lp  # a bug: kept a token the target did not prefer
        ranked = ranked[: seq.top_logprobs]
        if seq.top_logprobs > 2:
            others = (
                w for w in ((runner + j) % len(WORDS) for j in range(1, len(WORDS))) if w != top
            )
            ranked += [
                (w, runner_lp - _FAR_BELOW - j)
                for j, w in zip(range(seq.top_logprobs - 2), others, strict=False)
            ]
        sglang = spec.metrics_dialect == "sglang"
        out.append(
            chunks.token_logprob(
                logprob_fields(token, sglang, seq.token_ids),
                logprob,
                [(logprob_fields(w, sglang, seq.token_ids), lp) for w, lp in ranked],
            )
        )
    return out


def closing_events(spec: ScriptedEngineSpec, seq: Sequence) -> bytes:
    """Where each engine puts its per-request figures: vLLM on the final usage chunk
    (sent only when usage was asked for), SGLang in a chunk of its own before it."""
    extra = spec_extra(spec, seq)
    model, out = spec.served_model, b""
    if extra is not None and spec.metrics_dialect == "sglang":
        out += chunks.sse(chunks.usage_chunk(seq.rid, model, None, extra))
        extra = None
    if seq.include_usage:
        out += chunks.sse(
            chunks.usage_chunk(
                seq.rid, model, chunks.usage(seq.prompt_tokens, seq.generated), extra
            )
        )
    return out + chunks.DONE


def spec_extra(spec: ScriptedEngineSpec, seq: Sequence) -> dict | None:
    if not (spec.per_request_spec_metrics and spec.num_draft_tokens):
        return None
    if spec.metrics_dialect == "sglang" and not seq.spec_details:
        return None
    return chunks.spec_figures(
        spec.metrics_dialect,
        seq.drafts,
        seq.draft_tokens,
        seq.accepted,
        seq.histogram or [0] * (spec.num_draft_tokens + 1),
        seq.generated,
        spec.num_draft_tokens,
    )
