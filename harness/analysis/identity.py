"""Greedy identity: a drafter arm's outputs against its baseline's, item by item.

Bit-identity can fail for numeric reasons, so each mismatch says where and how: the
first divergent character with the text around it in both outputs, the index of the
first divergent whitespace-separated word (the client records text, not token ids, so
this is a word index, not a token position), and each side's finish reason and
completion tokens, so an output cut at max_tokens on one side only is named as such.

An item whose request failed on either side has no output to compare: it is listed
as not compared, never counted as a mismatch (a refused request says nothing about
the drafter's outputs; the error-rate limit guards against many of them).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from harness.analysis.load import CellData
from harness.records import RequestRecord

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

    @property
    def share(self) -> float | None:
        return self.n_identical / self.n_compared if self.n_compared else None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["share"] = self.share
        return d


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


def _around(text: str, i: int) -> str:
    lo = max(0, i - CONTEXT_CHARS)
    snippet = text[lo:i + CONTEXT_CHARS]
    return ("..." if lo else "") + snippet + ("..." if i + CONTEXT_CHARS < len(text) else "")


def _by_item(cell: CellData) -> dict[str, RequestRecord]:
    return {r.item_id: r for r in cell.requests}


def _max_tokens_note(d: RequestRecord, b: RequestRecord) -> str:
    cut_d, cut_b = d.finish_reason == MAX_TOKENS_FINISH, b.finish_reason == MAX_TOKENS_FINISH
    if cut_d == cut_b:
        return ""
    side, other = ("drafter", b) if cut_d else ("baseline", d)
    return (f"only the {side} hit max_tokens (finish_reason {MAX_TOKENS_FINISH}); the other"
            f" side finished with {other.finish_reason!r}")


def compare_identity(drafter: CellData, baseline: CellData) -> IdentityResult:
    """Every item either cell holds; an item lacking a successful output on a side is
    not compared, and said so."""
    d_rec, b_rec = _by_item(drafter), _by_item(baseline)
    ids = list(dict.fromkeys([*b_rec, *d_rec]))
    result = IdentityResult(drafter.arm, baseline.arm, drafter.task, 0, 0)
    for item in ids:
        d, b = d_rec.get(item), b_rec.get(item)
        if d is None or b is None or not d.ok or not b.ok:
            failed = [f"{side}: {'no request' if r is None else r.error}"
                      for side, r in (("drafter", d), ("baseline", b)) if r is None or not r.ok]
            result.not_compared.append(NotCompared(item, "; ".join(failed)))
            continue
        result.n_compared += 1
        i = first_divergence(d.output_text, b.output_text)
        if i is None:
            result.n_identical += 1
            continue
        w = first_word_divergence(d.output_text, b.output_text)
        notes = [n for n in (_max_tokens_note(d, b),
                             "the words agree; only whitespace differs" if w is None else "")
                 if n]
        result.mismatches.append(Mismatch(
            item, i, w, _around(d.output_text, i), _around(b.output_text, i), d.finish_reason,
            b.finish_reason, d.completion_tokens, b.completion_tokens, "; ".join(notes)))
    return result
