"""One place a rehearsal departs from its registration, and why (harness/rehearsal)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Difference:
    """One place the rehearsal departs from the registration, and why."""

    what: str
    registered: str
    rehearsal: str
    why: str
    arms: tuple[str, ...] = ()  # the arms it concerns (none: the whole study)

    def sentence(self) -> str:
        arms = (
            f" (arm{'s' if len(self.arms) > 1 else ''} {', '.join(self.arms)})" if self.arms else ""
        )
        return (
            f"rehearsal on the CPU build: {self.what}{arms}: registered {self.registered};"
            f" here {self.rehearsal} ({self.why})"
        )


def merged(diffs: list[Difference]) -> list[Difference]:
    """One difference per kind, naming every arm it concerns, in first-seen order."""
    out: dict[tuple, Difference] = {}
    for d in diffs:
        key = (d.what, d.registered, d.rehearsal, d.why)
        seen = out.get(key)
        out[key] = d if seen is None else Difference(*key, arms=seen.arms + d.arms)
    return list(out.values())
