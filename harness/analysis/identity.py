"""Greedy identity: a drafter arm's outputs against its baseline's, item by item.

Bit-identity can fail for numeric reasons, so each mismatch says where and how: the
first divergent character with the text around it in both outputs, the index of the
first divergent whitespace-separated word (the client records text, not token ids, so
this is a word index, not a token position), and each side's finish reason and
completion tokens, so an output cut at max_tokens on one side only is named as such.

An item whose request failed on either side has no output to compare: it is listed
as not compared, never counted as a mismatch (a refused request says nothing about
the drafter's outputs; the error-rate limit guards against many of them).

Identity cells ask the engine for each output token's logprob and its top two
alternatives, so a mismatch is also placed at its first divergent token with the
target's margin (logprob of its top-1 minus its top-2) on each side: a divergence where
the target's two best tokens were a near-tie (margin below `near_tie_margin` on either
side, and the two emitted tokens are those two) is `numeric` -- speculative decoding is
lossless up to numerics, and the verification pass's k+1 positions round differently
from a one-token step (vllm#7627) -- and any other is `real`: the target clearly
preferred the token the drafter arm did not emit. Without logprobs on a side it is
`unknown`, never numeric.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

from harness.analysis.load import CellData
from harness.derived.tokens import filled, first_difference
from harness.records import RequestRecord, TokenLogprob, token_key

# Characters shown either side of where two outputs part (the analysis's and the smoke's).
CONTEXT_CHARS = 40
MAX_TOKENS_FINISH = "length"  # the OpenAI API's finish reason for hitting max_tokens


@dataclass(frozen=True)
class Mismatch:
    item_id: str
    char_index: int
    word_index: int | None  # whitespace-separated words, not tokens; None: only spacing differs
    drafter_text: str  # around the divergence
    baseline_text: str
    drafter_finish: str | None
    baseline_finish: str | None
    drafter_tokens: int | None  # completion tokens
    baseline_tokens: int | None
    note: str = ""
    divergence: TokenDivergence | None = None  # at the first divergent token


DivergenceKind = Literal["numeric", "real", "unknown"]


@dataclass(frozen=True)
class TokenDivergence:
    """Where two outputs first differ, token by token, and how sure the target was there."""

    token_index: int | None  # 0-based; None: a side sent no logprobs
    drafter_token: str | None
    baseline_token: str | None
    drafter_margin: float | None  # logprob(top-1) - logprob(top-2) at that position
    baseline_margin: float | None
    kind: DivergenceKind
    why: str

    def line(self) -> str:
        def m(v: float | None) -> str:
            return "-" if v is None else f"{v:.3g}"

        if self.token_index is None:
            return f"{self.kind}: {self.why}"
        return (
            f"token {self.token_index}: {self.drafter_token!r} (drafter, margin"
            f" {m(self.drafter_margin)}) vs {self.baseline_token!r} (baseline, margin"
            f" {m(self.baseline_margin)}): {self.kind}"
        )


@dataclass(frozen=True)
class NotCompared:
    item_id: str
    why: str  # which side failed, and its error


@dataclass
class IdentityResult:
    arm: str
    baseline: str
    task: str
    n_compared: int
    n_identical: int
    mismatches: list[Mismatch] = field(default_factory=list)
    not_compared: list[NotCompared] = field(default_factory=list)
    count: Literal["exact", "beyond_near_ties"] = "exact"  # the registered reading

    @property
    def n_numeric(self) -> int:
        """Mismatches whose first divergence was a near-tie of the target's."""
        return sum(
            1
            for m in self.mismatches
            if m.divergence is not None and m.divergence.kind == "numeric"
        )

    @property
    def n_counted_identical(self) -> int:
        """Identical under the registered reading: `beyond_near_ties` counts numeric ones."""
        return self.n_identical + (self.n_numeric if self.count == "beyond_near_ties" else 0)

    @property
    def share(self) -> float | None:
        return self.n_counted_identical / self.n_compared if self.n_compared else None

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(
            share=self.share, n_numeric=self.n_numeric, n_counted_identical=self.n_counted_identical
        )
        return d


def token_divergence(
    drafter: list[TokenLogprob] | None,
    baseline: list[TokenLogprob] | None,
    near_tie_margin: float,
    drafter_text: str | None = None,
    baseline_text: str | None = None,
) -> TokenDivergence:
    """The first divergent token of two scored outputs whose texts differ, and its kind
    (`unknown` when a side sent no logprobs, when the divergence falls among tokens an
    engine never scored, or when every token agrees all the same). Tokens are compared
    by key (bytes or token id: harness/derived/tokens.py), never by text."""
    if drafter is None or baseline is None:
        side = " and ".join(
            n for n, v in (("drafter", drafter), ("baseline", baseline)) if v is None
        )
        return TokenDivergence(
            None, None, None, None, None, "unknown", f"the engine sent no logprobs for the {side}"
        )
    drafter, baseline = filled(drafter, drafter_text), filled(baseline, baseline_text)
    i, lost = first_difference(drafter, baseline, drafter_text, baseline_text)
    if lost is not None:
        return TokenDivergence(i, None, None, None, None, "unknown", lost)
    if i is None:
        if len(drafter) == len(baseline):
            return TokenDivergence(
                None, None, None, None, None, "unknown", "the tokens agree but the texts differ"
            )
        i = min(len(drafter), len(baseline))  # one side stopped: the other's token there
    d = drafter[i] if i < len(drafter) and not drafter[i].lost else None
    b = baseline[i] if i < len(baseline) and not baseline[i].lost else None
    dm, bm = (d.margin if d else None), (b.margin if b else None)
    tokens = (d.shown if d else None, b.shown if b else None)
    if dm is None and bm is None:
        return TokenDivergence(
            i, *tokens, None, None, "unknown", "no top-2 alternatives at the divergent token"
        )
    tie = any(m is not None and m < near_tie_margin for m in (dm, bm))
    # The two emitted tokens must be the tied pair, on each side that sent its top two: a
    # near-tie between two other tokens says nothing about a token the target ranked lower.
    emitted = {t.key for t in (d, b) if t is not None}
    pair = all(
        emitted <= {token_key(a[0], a[2] if len(a) > 2 else None) for a in side.top[:2]}
        for side in (d, b)
        if side is not None and len(side.top) >= 2
    )
    if tie and pair:
        return TokenDivergence(
            i,
            *tokens,
            dm,
            bm,
            "numeric",
            f"the target's top two were within {near_tie_margin:g} nats",
        )
    why = (
        "the emitted tokens are not the target's top two"
        if tie
        else f"the target preferred its token by {near_tie_margin:g} nats or more on both sides"
    )
    return TokenDivergence(i, *tokens, dm, bm, "real", why)


def first_divergence(a: str, b: str) -> int | None:
    """Index of the first character where a and b differ; None when equal."""
    if a == b:
        return None
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def first_word_divergence(a: str, b: str) -> int | None:
    """Index of the first differing whitespace-separated word; None when the words agree."""
    ta, tb = a.split(), b.split()
    if ta == tb:
        return None
    for i, (x, y) in enumerate(zip(ta, tb, strict=False)):
        if x != y:
            return i
    return min(len(ta), len(tb))


def excerpt_around(text: str, i: int) -> str:
    """The text around character i, with `...` where it is cut."""
    lo = max(0, i - CONTEXT_CHARS)
    snippet = text[lo : i + CONTEXT_CHARS]
    return ("..." if lo else "") + snippet + ("..." if i + CONTEXT_CHARS < len(text) else "")


def _by_item(cell: CellData) -> dict[str, RequestRecord]:
    return {r.item_id: r for r in cell.requests}


def _max_tokens_note(d: RequestRecord, b: RequestRecord) -> str:
    cut_d, cut_b = d.finish_reason == MAX_TOKENS_FINISH, b.finish_reason == MAX_TOKENS_FINISH
    if cut_d == cut_b:
        return ""
    side, other = ("drafter", b) if cut_d else ("baseline", d)
    return (
        f"only the {side} hit max_tokens (finish_reason {MAX_TOKENS_FINISH}); the other"
        f" side finished with {other.finish_reason!r}"
    )


# What a study without `bars.pass.identity` reads by (the registered default).
DEFAULT_NEAR_TIE_MARGIN = 0.5


def compare_identity(
    drafter: CellData,
    baseline: CellData,
    count: Literal["exact", "beyond_near_ties"] = "exact",
    near_tie_margin: float = DEFAULT_NEAR_TIE_MARGIN,
) -> IdentityResult:
    """Every item either cell holds; an item lacking a successful output on a side is
    not compared, and said so. Every mismatch's first divergent token is classified;
    `count` says whether numeric ones count as identical."""
    d_rec, b_rec = _by_item(drafter), _by_item(baseline)
    ids = list(dict.fromkeys([*b_rec, *d_rec]))
    result = IdentityResult(drafter.arm, baseline.arm, drafter.task, 0, 0, count=count)
    for item in ids:
        d, b = d_rec.get(item), b_rec.get(item)
        if d is None or b is None or not d.ok or not b.ok:
            failed = [
                f"{side}: {'no request' if r is None else r.error}"
                for side, r in (("drafter", d), ("baseline", b))
                if r is None or not r.ok
            ]
            result.not_compared.append(NotCompared(item, "; ".join(failed)))
            continue
        result.n_compared += 1
        i = first_divergence(d.output_text, b.output_text)
        if i is None:
            result.n_identical += 1
            continue
        w = first_word_divergence(d.output_text, b.output_text)
        notes = [
            n
            for n in (
                _max_tokens_note(d, b),
                "the words agree; only whitespace differs" if w is None else "",
            )
            if n
        ]
        divergence = token_divergence(
            d.token_logprobs, b.token_logprobs, near_tie_margin, d.output_text, b.output_text
        )
        result.mismatches.append(
            Mismatch(
                item,
                i,
                w,
                excerpt_around(d.output_text, i),
                excerpt_around(b.output_text, i),
                d.finish_reason,
                b.finish_reason,
                d.completion_tokens,
                b.completion_tokens,
                "; ".join(notes),
                divergence,
            )
        )
    return result
