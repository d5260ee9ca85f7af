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
    return [*messages, {"role": "assistant", "content": answer}, {"role": "user", "content": turn}]


def scored_output_fields(dialect: str) -> dict:
    """Asked of identity cells and the smoke (never of speed cells: logprobs cost the
    engine time): each output token's logprob and the target's two best alternatives, so
    a divergence from the baseline is placed at its token with the target's margin there
    (harness/analysis/identity.py). vLLM is asked for token ids in place of token text
    (`return_tokens_as_token_ids`, its ChatCompletionRequest), since two fragments of a
    multi-byte character both print as U+FFFD; SGLang sends each token's true bytes
    unasked (serving_chat.py `_build_token_logprobs_from_raw`)."""
    fields: dict = {"logprobs": True, "top_logprobs": 2}
    return {**fields, "return_tokens_as_token_ids": True} if dialect == "vllm" else fields


__all__ = ["RequestSpec", "next_turn_messages", "session_item_id", "turn_item_id"]
