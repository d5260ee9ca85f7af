"""The engines' per-request speculation figures, read from a response in their own names.

The one place that knows these field names (as harness.engines.readout.metrics is for /metrics).

vLLM 0.32, started with `--per-request-spec-decode-metrics summary`:
vllm/entrypoints/openai/chat_completion/serving.py puts `metrics.speculative_decoding`
(SpeculativeDecodingMetrics in vllm/entrypoints/generate/base/protocol.py) on a stream's
final usage chunk (`choices: []`, sent only with stream_options.include_usage) and on a
plain response. vllm/v1/metrics/stats.py (RequestSpecDecodeMetrics.to_dict) fills it:
num_spec_steps (= sum of acceptance_histogram), num_accepted_draft_tokens,
num_draft_tokens, acceptance_histogram (index j: verify steps that kept j drafts). The
scheduler (vllm/v1/core/sched/scheduler.py) observes a request's step where it feeds
vllm:spec_decode_num_drafts_total, so summed over requests they count what the counters
count.

SGLang, asked per request with `return_spec_tokens_details: true` (PR 33518):
python/sglang/srt/entrypoints/openai/serving_chat.py sends `sglext.spec_tokens_details`
(SpecTokensDetails) in a chunk of its own (`choices: []`) after the finish chunk and
before the usage chunk, and on a plain response; utils.spec_tokens_details_from_meta_info
fills spec_verify_ct, spec_num_correct_drafts, spec_num_proposed_drafts,
spec_correct_drafts_histogram and spec_accept_length (= completion_tokens / spec_verify_ct).
"""

from __future__ import annotations

from harness.dialects import Dialect
from harness.records import RequestSpeculation

# Where each engine puts the figures in a response object: (outer key, inner key).
LOCATIONS: dict[Dialect, tuple[str, str]] = {
    "vllm": ("metrics", "speculative_decoding"),
    "sglang": ("sglext", "spec_tokens_details"),
}
# RequestSpeculation field -> the engine's own field name.
FIELDS: dict[Dialect, dict[str, str]] = {
    "vllm": {
        "rounds": "num_spec_steps",
        "draft_tokens": "num_draft_tokens",
        "accepted": "num_accepted_draft_tokens",
        "histogram": "acceptance_histogram",
    },
    "sglang": {
        "rounds": "spec_verify_ct",
        "draft_tokens": "spec_num_proposed_drafts",
        "accepted": "spec_num_correct_drafts",
        "histogram": "spec_correct_drafts_histogram",
    },
}


def find_spec_figures(obj: dict) -> tuple[Dialect, dict] | None:
    """The speculation figures one response object (a chunk or a whole response)
    carries, and the engine whose names they are in; None when it carries none."""
    for dialect, (outer, inner) in LOCATIONS.items():
        holder = obj.get(outer)
        figures = holder.get(inner) if isinstance(holder, dict) else None
        if isinstance(figures, dict) and figures:
            return dialect, figures
    return None


def _count(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if value < 0 or value != int(value):
        return None
    return int(value)


def parse_request_speculation(dialect: Dialect, figures: dict) -> RequestSpeculation | None:
    """The figures in specbench's names; None when a count is missing or not a count
    (a figure that cannot be summed is no figure)."""
    names = FIELDS[dialect]
    rounds, draft_tokens, accepted = (
        _count(figures.get(names[field])) for field in ("rounds", "draft_tokens", "accepted")
    )
    if rounds is None or draft_tokens is None or accepted is None:
        return None
    raw = figures.get(names["histogram"]) or []
    if not isinstance(raw, list):
        return None
    histogram = [n for v in raw if (n := _count(v)) is not None]
    if len(histogram) < len(raw):
        return None
    return RequestSpeculation(
        engine=dialect,
        rounds=rounds,
        draft_tokens=draft_tokens,
        accepted=accepted,
        histogram=histogram,
    )


def request_speculation(obj: dict) -> tuple[dict, RequestSpeculation | None] | None:
    """(the raw figures, parsed) from one response object, or None when it has none."""
    found = find_spec_figures(obj)
    if found is None:
        return None
    dialect, figures = found
    return figures, parse_request_speculation(dialect, figures)
