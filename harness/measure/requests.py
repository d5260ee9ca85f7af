"""What the load driver sends: one chat request per task item, in registered order."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RequestSpec:
    item_id: str
    messages: list[dict]
    max_tokens: int
