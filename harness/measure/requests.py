"""What the load driver sends: one chat request per task item, in registered order."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RequestSpec:
    item_id: str
    messages: list[dict]
    max_tokens: int


# Asked of identity cells and the smoke (never of speed cells: logprobs cost the engine
# time): each output token's logprob and the target's two best alternatives, so a
# divergence from the baseline is placed at its token with the target's margin there
# (harness/analysis/identity.py). The OpenAI chat API's fields, served by vLLM and SGLang.
SCORED_OUTPUT_FIELDS: dict = {"logprobs": True, "top_logprobs": 2}
