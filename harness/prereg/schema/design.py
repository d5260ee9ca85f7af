"""The registered design (`design:`): when the bars are read, fixed before any GPU time."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from harness.prereg.schema.base import PositiveInt, Strict


class Design(Strict):
    kind: Literal["fixed", "group_sequential"] = Field(
        "fixed",
        description="fixed: every repeating cell is measured in all"
        " recording.sessions sessions and the bars are read once, at the end."
        " group_sequential: the bars are also read at each look (the end of a session);"
        " a bar whose outcome is the same with every speedup at either end of its repeated"
        " confidence interval is decided there, and a cell that no undecided bar reads is"
        " not measured in the sessions after (docs: concepts/sequential.md)",
    )
    looks: tuple[PositiveInt, ...] | None = Field(
        None,
        description="group_sequential: the numbers of sessions after which the bars"
        " are read, ascending, each at least 2 (a t interval over sessions needs two) and"
        " the last recording.sessions; default every session from 2 on",
    )
    spending: Literal["obrien_fleming", "pocock"] = Field(
        "obrien_fleming",
        description="group_sequential: how the intervals' error rate"
        " (1 - bars.intervals.level) is spent over the looks (Lan-DeMets spending"
        " functions): obrien_fleming spends little at the early looks and leaves the last"
        " interval near the fixed design's; pocock spends about evenly",
    )

    def looks_of(self, sessions: int) -> tuple[int, ...]:
        """The looks over `sessions` sessions (the registered ones, else 2..sessions)."""
        return self.looks if self.looks is not None else tuple(range(2, sessions + 1))


def design_problems(
    design: Design, sessions: int, method: str, pooling: str
) -> list[tuple[tuple, str]]:
    """What a study's design contradicts, each with its field path (Study's cross-check)."""
    if design.kind == "fixed":
        return []
    looks = design.looks_of(sessions)
    out: list[tuple[tuple, str]] = []
    if sessions < 3:
        out.append(
            (
                ("design", "kind"),
                f"a group-sequential design needs at least two looks,"
                f" i.e. recording.sessions >= 3 (it is {sessions}): a look needs two"
                " sessions for a t interval",
            )
        )
    elif list(looks) != sorted(set(looks)) or looks[0] < 2 or looks[-1] != sessions:
        out.append(
            (
                ("design", "looks"),
                f"expected ascending session counts from 2 on,"
                f" the last recording.sessions ({sessions}); got {list(looks)}",
            )
        )
    if method == "bootstrap":
        out.append(
            (
                ("bars", "intervals", "method"),
                "a group-sequential design reads t"
                " intervals over sessions (its repeated intervals are t intervals):"
                " expected auto or t_sessions",
            )
        )
    if pooling != "per_level":
        out.append(
            (
                ("bars", "intervals", "pooling"),
                "a group-sequential design reads each"
                " level's own t interval at each look: expected per_level",
            )
        )
    return out
