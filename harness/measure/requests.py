"""What the load driver sends: one chat request per task item, in registered order."""

from __future__ import annotations

from dataclasses import dataclass

from harness.records import session_item_id, turn_item_id


@dataclass
class RequestSpec:
    item_id: str
    messages: list[dict]
    max_tokens: int
    # A multi-turn item (a task registered with `turns: all`): the user's later turns.
    # The item is one user session: each is sent once the answer before it has arrived,
    # with that answer in the messages (harness.measure.driver).
    later_turns: tuple[str, ...] = ()


def next_turn_messages(messages: list[dict], answer: str, turn: str) -> list[dict]:
    """The messages of a session's next turn: everything sent so far, the answer that
    came back, and the user's next message."""
    return [*messages, {"role": "assistant", "content": answer},
            {"role": "user", "content": turn}]


# Asked of identity cells and the smoke (never of speed cells: logprobs cost the engine
# time): each output token's logprob and the target's two best alternatives, so a
# divergence from the baseline is placed at its token with the target's margin there
# (harness/analysis/identity.py). The OpenAI chat API's fields, served by vLLM and SGLang.
SCORED_OUTPUT_FIELDS: dict = {"logprobs": True, "top_logprobs": 2}


__all__ = ["RequestSpec", "next_turn_messages", "session_item_id", "turn_item_id"]
