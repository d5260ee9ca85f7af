"""A request as the scripted engine holds it: its state (`Sequence`), where its bytes go
(`Sink`), and its prompt's key."""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass, field
from typing import Protocol

from harness.testengine.spec import FailureInjection
from harness.testengine.tokens import StreamedText


def prompt_key(messages: list) -> int:
    """A stable key for a request's messages (independent of the process's hash seed)."""
    data = json.dumps(messages, sort_keys=True, ensure_ascii=False).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


class Sink(Protocol):
    """Where a request's bytes go (the HTTP connection)."""

    def start(self) -> None: ...
    def send(self, data: bytes) -> float: ...  # returns the monotonic time it left
    def finish(self, body: bytes | None = None) -> float: ...
    def abort(self) -> None: ...
    @property
    def gone(self) -> bool: ...


@dataclass
class Sequence:
    rid: str
    number: int  # arrival number over the engine's life, 1-based
    prompt_tokens: int
    max_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool
    continuous_usage: bool
    sink: Sink
    arrival_t: float
    failure: FailureInjection | None = None
    prefilled: bool = False
    generated: int = 0
    chunk_index: int = 0
    first_t: float | None = None
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    histogram: list[int] = field(default_factory=list)  # rounds by drafts kept
    # accept_draws: even, each position's running share of rounds owed (error diffusion)
    owed: list[float] = field(default_factory=list)
    # SGLang sends its per-request figures only when the request asks
    # (`return_spec_tokens_details`); vLLM whenever its serve flag is on.
    spec_details: bool = False
    text: list[bytes] = field(default_factory=list)
    done: asyncio.Future | None = None
    prompt_key: int = 0  # the text is a function of the prompt, as greedy decoding is
    held: list[tuple[bytes, list[int]]] = field(default_factory=list)  # flush_every_steps
    # The request asked for logprobs (with this many alternatives per token): each token's
    # entry, kept alongside text for per_request chunking and the non-streamed body.
    logprobs: bool = False
    top_logprobs: int = 0
    token_ids: bool = False  # vLLM's return_tokens_as_token_ids
    scores: list[dict] = field(default_factory=list)
    streamed: StreamedText | None = None  # the text as the engine streams it
    unsent: int = 0  # tokens of steps that sent no chunk (SGLang: empty text)
