"""Speculation seen from the engine's own per-request figures, summed over a cell, and
checked against the counters and the client's chunks.

Each measured request that succeeded carries the engine's figures for it
(RequestRecord.speculation: vLLM `metrics.speculative_decoding`, SGLang
`sglext.spec_tokens_details`); warm-up requests are not the cell's. Summed, they give
the engine's tokens per drafting round a second way, in the engine's own formula, the
same one the counters are read with (acceptance.py):
  vLLM    1 + sum(num_accepted_draft_tokens) / sum(num_spec_steps)
  SGLang  sum(completion_tokens) / sum(spec_verify_ct)
The counters' window also holds the cell's warm-up requests (at 4 users and 8 measured
requests, a third of what it counted), so the counters are checked against the same
sum over every request of the attempt, warm-up included: two ways of one count.

The client's tokens per decode step (one streamed chunk is one step) can only be lower:
a step without drafts adds a chunk but no round (vLLM n-gram), and SGLang's formula
counts the prefill's token; it is higher only when the stream merged steps into chunks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.dialects import Dialect
from harness.records import RequestRecord

# Relative difference beyond which two acceptance figures of one cell disagree.
AGREE_WITHIN = 0.05


@dataclass(frozen=True)
class RequestAcceptance:
    engine: Dialect  # the dialect the figures came in
    requests: int  # measured, successful requests that carried figures
    rounds: int  # drafting rounds (vLLM num_spec_steps; SGLang spec_verify_ct)
    draft_tokens: int
    accepted: int
    completion_tokens: int
    histogram: list[int]  # rounds by drafts kept, summed over the requests
    accept_length_per_round: float | None  # None when no round ran
    acceptance_rate: float | None  # accepted / draft_tokens


def request_acceptance(records: list[RequestRecord], phases: tuple[str, ...] = ("measure",)
                       ) -> RequestAcceptance | None:
    """The figures summed over the successful requests of those phases (by default the
    cell's measured ones); None when none carried any."""
    with_figures = [(r, s) for r in records
                    if r.ok and r.phase in phases and (s := r.speculation) is not None]
    if not with_figures:
        return None
    engine = with_figures[0][1].engine
    rounds = draft_tokens = accepted = completion = 0
    histogram: list[int] = []
    for rec, s in with_figures:
        rounds += s.rounds
        draft_tokens += s.draft_tokens
        accepted += s.accepted
        completion += rec.completion_tokens or 0
        if len(s.histogram) > len(histogram):
            histogram += [0] * (len(s.histogram) - len(histogram))
        for j, n in enumerate(s.histogram):
            histogram[j] += n
    length = None
    if rounds:
        length = 1.0 + accepted / rounds if engine == "vllm" else completion / rounds
    return RequestAcceptance(
        engine=engine, requests=len(with_figures), rounds=rounds, draft_tokens=draft_tokens,
        accepted=accepted, completion_tokens=completion, histogram=histogram,
        accept_length_per_round=length,
        acceptance_rate=accepted / draft_tokens if draft_tokens else None)


def _figure(value: float | None) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


def acceptance_disagreement(engine: float | None, requests: float | None,
                            client: float | None, window: float | None = None,
                            within: float = AGREE_WITHIN) -> tuple[bool | None, str | None]:
    """(agree, why not) for one cell's three figures: the counters against the summed
    per-request figures of the requests in their window (`window`: warm-up included;
    the measured ones' `requests` when not given), on either side, and the client's
    tokens per step against the measured requests' figure (it may only be lower). agree
    is None when there is no per-request figure, or neither other figure."""
    engine, requests, client = _figure(engine), _figure(requests), _figure(client)
    window = _figure(window)
    if requests is None or (engine is None and client is None):
        return None, None
    problems = []
    same = window if window is not None else requests
    if engine is not None and abs(engine - same) > within * same:
        over = " over the same requests (warm-up included)" if window is not None else ""
        problems.append(f"engine counters {engine:.3f} vs per-request {same:.3f}{over}"
                        f" ({(engine - same) / same:+.1%})")
    if client is not None and client > requests * (1 + within):
        problems.append(f"client {client:.3f} above per-request {requests:.3f}"
                        f" ({(client - requests) / requests:+.1%})")
    return (not problems), ("; ".join(problems) or None)
