"""OpenAI-compatible chat completion bodies, shaped like vLLM's (see the .sse fixtures)."""

from __future__ import annotations

import json
import time

from harness.dialects import Dialect

_dumps = json.JSONEncoder(separators=(",", ":")).encode


def sse(obj: dict) -> bytes:
    return b"data: " + _dumps(obj).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }


def stream_chunk(
    rid: str,
    model: str,
    delta: dict,
    finish_reason: str | None = None,
    usage_now: dict | None = None,
    logprobs: list[dict] | None = None,
) -> dict:
    """One streamed chunk; `logprobs` (the chunk's tokens' entries) only when asked, so a
    request that did not ask gets `"logprobs": null` as vLLM sends it."""
    scored = None if logprobs is None else {"content": logprobs}
    body = {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "delta": delta, "logprobs": scored, "finish_reason": finish_reason}
        ],
    }
    if usage_now is not None:
        body["usage"] = usage_now
    return body


def usage_chunk(rid: str, model: str, usage_now: dict | None, extra: dict | None = None) -> dict:
    body = {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [],
        "usage": usage_now,
    }
    body.update(extra or {})
    return body


def token_logprob(token: dict, logprob: float, top: list[tuple[dict, float]]) -> dict:
    """One token's entry in `logprobs.content` (vLLM's ChatCompletionLogProbsContent):
    its text and bytes (`token`: harness.testengine.tokens.logprob_fields), its logprob,
    and its top alternatives, best first."""
    return {**token, "logprob": logprob, "top_logprobs": [{**t, "logprob": lp} for t, lp in top]}


def completion(
    rid: str,
    model: str,
    text: str,
    finish_reason: str,
    usage_now: dict,
    extra: dict | None = None,
    logprobs: list[dict] | None = None,
) -> dict:
    body = {
        "id": rid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None if logprobs is None else {"content": logprobs},
                "finish_reason": finish_reason,
            }
        ],
        "usage": usage_now,
    }
    body.update(extra or {})
    return body


def spec_figures(
    dialect: Dialect,
    drafts: int,
    draft_tokens: int,
    accepted: int,
    histogram: list[int],
    completion_tokens: int,
    k: int,
) -> dict:
    """The engine's per-request speculation figures, in each engine's own field names and
    place (harness.engines.readout.request_spec names the sources): vLLM's
    `metrics.speculative_decoding`, SGLang's `sglext.spec_tokens_details`."""
    if dialect == "sglang":
        return {
            "sglext": {
                "spec_tokens_details": {
                    "spec_accept_rate": accepted / draft_tokens if draft_tokens else 0.0,
                    "spec_accept_length": completion_tokens / drafts if drafts else 0.0,
                    "spec_num_correct_drafts": accepted,
                    "spec_num_proposed_drafts": draft_tokens,
                    "spec_verify_ct": drafts,
                    "spec_correct_drafts_histogram": list(histogram),
                }
            }
        }
    return {
        "metrics": {
            "speculative_decoding": {
                "mean_acceptance_length": 1.0 + accepted / drafts if drafts else 1.0,
                "draft_acceptance_rate": accepted / draft_tokens if draft_tokens else 0.0,
                "acceptance_histogram": list(histogram),
                "num_spec_steps": drafts,
                "num_accepted_draft_tokens": accepted,
                "num_draft_tokens": draft_tokens,
                "num_spec_tokens": k,
            }
        }
    }
