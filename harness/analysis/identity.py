"""Greedy identity: a drafter arm's outputs against its baseline's, item by item.

Bit-identity can fail for numeric reasons, so each mismatch says where: the first
divergent character with the text around it in both outputs, and the first
divergent whitespace-separated token.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from harness.analysis.load import CellData

CONTEXT_CHARS = 40


@dataclass(frozen=True)
class Mismatch:
    item_id: str
    char_index: int | None  # None when one side has no output
    token_index: int | None
    drafter_text: str  # around the divergence
    baseline_text: str
    note: str = ""


@dataclass
class IdentityResult:
    arm: str
    baseline: str
    task: str
    n_compared: int
    n_identical: int
    mismatches: list[Mismatch] = field(default_factory=list)

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


def first_token_divergence(a: str, b: str) -> int | None:
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


def _outputs(cell: CellData) -> dict[str, str | None]:
    # An item whose request failed has no output (None): it cannot be identical.
    out: dict[str, str | None] = {}
    for r in cell.requests:
        out[r.item_id] = r.output_text if r.ok else None
    return out


def compare_identity(drafter: CellData, baseline: CellData) -> IdentityResult:
    """Every baseline item is compared; an item either side lacks counts as a mismatch."""
    d_out, b_out = _outputs(drafter), _outputs(baseline)
    ids = list(dict.fromkeys([*b_out, *d_out]))
    result = IdentityResult(drafter.arm, baseline.arm, drafter.task, len(ids), 0)
    for item in ids:
        a, b = d_out.get(item), b_out.get(item)
        if a is None or b is None:
            side = "drafter" if a is None else "baseline"
            result.mismatches.append(Mismatch(item, None, None, a or "", b or "",
                                              f"no output from the {side} arm"))
            continue
        i = first_divergence(a, b)
        if i is None:
            result.n_identical += 1
            continue
        result.mismatches.append(
            Mismatch(item, i, first_token_divergence(a, b), _around(a, i), _around(b, i))
        )
    return result
