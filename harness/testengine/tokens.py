"""The scripted model's vocabulary, and how each engine turns a step's tokens into text.

Token ids below FRAGMENTS are words (" the", ...); the ids from FRAGMENTS on are byte
fragments of multi-byte characters, which print as U+FFFD on their own: with
`split_char_at_token: N` output token N is the first two bytes of U+4E2D (its runner-up
the first two of U+4E6D) and token N + 1 the last byte of both, so a step can end
inside a character.

Streamed text (tests reproduce what each engine sends): vLLM holds an incomplete
character back and still sends the step's chunk, logprobs and all; SGLang 0.5.23 emits
a step's "printable" text (managers/detokenizer_manager.py:400-413, utils.py
find_printable_text) and sends no chunk when it is empty, so that step's logprobs are
lost (entrypoints/openai/serving_chat.py `if delta:`).
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field

WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "it",
    "for",
    "on",
    "with",
    "as",
    "was",
    "at",
    "by",
    "an",
    "be",
    "this",
    "from",
    "or",
    "are",
    "not",
    "have",
    "one",
    "all",
    "were",
    "which",
    "when",
    "there",
    "can",
    "more",
    "if",
    "will",
    "each",
    "about",
    "how",
    "up",
    "out",
    "them",
]
FRAGMENTS = 1000
_FRAGMENT_BYTES = [b"\xe4\xb8", b"\xe4\xb9", b"\xad"]  # U+4E2D / U+4E6D split after 2 bytes

# Mixed into the prompt key to draw each position's runner-up apart from its top-1 word.
_RUNNER_UP_SALT = 0x5EC0_4D00_0000_0029


def mix(key: int, position: int) -> int:
    """A fixed 64-bit integer hash (splitmix64) of a prompt key and a position."""
    z = (key * 0x9E3779B97F4A7C15 + position + 1) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


def candidates(key: int, index: int, split_at: int | None = None) -> tuple[int, int]:
    """The scripted model's top-1 and runner-up token ids at output index `index`
    (0-based): the top-1 is the text's, the runner-up another token."""
    if split_at is not None and index == split_at - 1:
        return FRAGMENTS, FRAGMENTS + 1
    top = mix(key, index) % len(WORDS)
    if split_at is not None and index == split_at:
        return FRAGMENTS + 2, top
    runner = mix(key ^ _RUNNER_UP_SALT, index) % (len(WORDS) - 1)
    return top, runner + (runner >= top)  # skips the top-1, so the two always differ


def token_bytes(token_id: int) -> bytes:
    if token_id >= FRAGMENTS:
        return _FRAGMENT_BYTES[token_id - FRAGMENTS]
    return (" " + WORDS[token_id]).encode()


def logprob_fields(token_id: int, sglang: bool, as_id: bool) -> dict:
    """An entry's `token` and `bytes` as the engine sends them: SGLang its text (a
    fragment's is U+FFFD) and true bytes; vLLM its text and that text's bytes, or
    `token_id:N` when asked (return_tokens_as_token_ids)."""
    raw = token_bytes(token_id)
    text = f"token_id:{token_id}" if as_id else raw.decode("utf-8", "replace")
    return {"token": text, "bytes": list(raw if sglang else text.encode())}


@dataclass
class StreamedText:
    """One request's text as its engine streams it, step by step."""

    sglang: bool
    held: bytes = b""  # SGLang: bytes not yet committed as text
    sent: int = 0  # SGLang: characters of the held text already sent
    decoder: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace")
    )

    def delta(self, data: bytes, final: bool) -> str:
        """The text a step whose tokens are `data` sends ("" : nothing yet)."""
        if not self.sglang:
            return self.decoder.decode(data, final)
        self.held += data
        text = self.held.decode("utf-8", "replace")
        if final or (text and not text.endswith("\ufffd")):
            out, self.held, self.sent = text[self.sent :], b"", 0
            return out
        printable = (
            text
            if text.endswith("\n")
            else text[:-1]
            if len(text) > 1 and _cjk(text[-2])
            else text[: text.rfind(" ") + 1]
        )
        out, self.sent = printable[self.sent :], max(self.sent, len(printable))
        return out


def _cjk(ch: str) -> bool:
    return 0x4E00 <= ord(ch) <= 0x9FFF or 0x3400 <= ord(ch) <= 0x4DBF
