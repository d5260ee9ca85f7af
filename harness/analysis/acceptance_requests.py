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

vLLM also counts, per draft position i, the rounds that kept at least i drafts; a round
whose request kept j drafts adds one to positions 1..j, so the summed histograms give the
same per-position figures, checked as well (SGLang exports no per-position counter).

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

    @property
    def per_position_rates(self) -> list[float] | None:
        """Per draft position, the share of rounds that kept it (vLLM's
        num_accepted_tokens_per_pos / num_drafts); None without rounds or a histogram."""
        if not self.rounds or len(self.histogram) < 2:
            return None
        return [sum(self.histogram[i:]) / self.rounds for i in range(1, len(self.histogram))]


def request_acceptance(
    records: list[RequestRecord], phases: tuple[str, ...] = ("measure",)
) -> RequestAcceptance | None:
    """The figures summed over the successful requests of those phases (by default the
    cell's measured ones); None when none carried any."""
    with_figures = [
        (r, s) for r in records if r.ok and r.phase in phases and (s := r.speculation) is not None
    ]
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
        engine=engine,
        requests=len(with_figures),
        rounds=rounds,
        draft_tokens=draft_tokens,
        accepted=accepted,
        completion_tokens=completion,
        histogram=histogram,
        accept_length_per_round=length,
        acceptance_rate=accepted / draft_tokens if draft_tokens else None,
    )


def _figure(value: float | None) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


def acceptance_disagreement(
    engine: float | None,
    requests: float | None,
    client: float | None,
    window: float | None = None,
    within: float = AGREE_WITHIN,
    engine_positions: list[float] | None = None,
    window_positions: list[float] | None = None,
) -> tuple[bool | None, str | None]:
    """(agree, why not) for one cell's three figures: the counters against the summed
    per-request figures of the requests in their window (`window`: warm-up included;
    the measured ones' `requests` when not given), on either side, and the client's
    tokens per step against the measured requests' figure (it may only be lower). agree
    is None when there is no per-request figure, or neither other figure. Where both
    sides give per-position rates (the counters' and the same requests' histograms),
    each position must agree within `within` of the first position's rate: one count,
    read twice, so a position off by more is a parsing or labelling fault (a position
    read as another, or a bonus token counted as a draft)."""
    engine, requests, client = _figure(engine), _figure(requests), _figure(client)
    window = _figure(window)
    if requests is None or (engine is None and client is None):
        return None, None
    problems = []
    same = window if window is not None else requests
    if engine is not None and abs(engine - same) > within * same:
        over = " over the same requests (warm-up included)" if window is not None else ""
        problems.append(
            f"engine counters {engine:.3f} vs per-request {same:.3f}{over}"
            f" ({(engine - same) / same:+.1%})"
        )
    if client is not None and client > requests * (1 + within):
        problems.append(
            f"client {client:.3f} above per-request {requests:.3f}"
            f" ({(client - requests) / requests:+.1%})"
        )
    if engine_positions and window_positions:
        scale = max(window_positions[0], engine_positions[0])
        n = max(len(engine_positions), len(window_positions))
        e = list(engine_positions) + [0.0] * (n - len(engine_positions))
        r = list(window_positions) + [0.0] * (n - len(window_positions))
        off = [i for i in range(n) if abs(e[i] - r[i]) > within * scale]
        if off:
            pairs = ", ".join(f"{i + 1}: {e[i]:.3f} vs {r[i]:.3f}" for i in off)
            problems.append(f"per-position counters vs per-request histograms at position {pairs}")
    return (not problems), ("; ".join(problems) or None)
