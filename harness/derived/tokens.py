"""Two scored outputs token by token, exactly: by each token's key (its bytes, or vLLM's
token id), never its text, across the tokens an engine counted but never scored.

SGLang 0.5.23 sends no chunk for a step whose text is empty (one ending inside a
multi-byte character: serving_chat.py `if delta:`), so its logprobs are lost; usage counts
its tokens and the text carries their bytes later. The client puts a `lost` placeholder
for each (harness.measure.stream). A run of them is compared by the bytes the text gives
it; a divergence inside one, or in lists whose known tokens tile their text no way or
several, cannot be read (identity calls it `unknown`, never `real`)."""

from __future__ import annotations

from harness.records import TokenLogprob

_CAP = 2  # alignments are counted to two: one is an answer, two an ambiguity


def tiled_prefix(tokens: list[TokenLogprob], text: str) -> int:
    """How many leading tokens' bytes continue `text` in order from its start."""
    data, off = text.encode(), 0
    for i, t in enumerate(tokens):
        if t.lost or not data.startswith(t.key, off):
            return i
        off += len(t.key)
    return len(tokens)


def align(tokens: list[TokenLogprob], text: str) -> list[int] | None:
    """The byte offset in `text` where each token starts (and one more: where the last
    ends), the known tokens' bytes tiling the text in order and each run of lost ones
    filling a gap; the last token may lie past the text (an end-of-sequence token).
    None: the tokens tile the text no way, or several."""
    data, n = text.encode(), len(tokens)
    # states[k]: {offset where token k starts: [ways (capped), offset at the step before]}
    states: list[dict[int, list[int]]] = [{} for _ in range(n + 1)]
    states[0][0] = [1, -1]

    def add(at: dict[int, list[int]], off: int, ways: int, prev: int) -> None:
        got = at.setdefault(off, [0, prev])
        got[0] = min(_CAP, got[0] + ways)

    k = 0
    while k < n:
        if not tokens[k].lost:
            key = tokens[k].key
            for off, (ways, _) in states[k].items():
                if data.startswith(key, off):
                    add(states[k + 1], off + len(key), ways, off)
            k += 1
            continue
        end = k
        while end < n and tokens[end].lost:
            end += 1
        # Only where the next known token's bytes start (or the text ends) can a run stop.
        nxt = tokens[end].key if end < n else b""
        for off, (ways, _) in states[k].items():
            stops = {len(data)}
            at = data.find(nxt, off) if nxt else -1
            while at != -1:
                stops.add(at)
                at = data.find(nxt, at + 1)
            for stop in stops if nxt or end == n else range(off, len(data) + 1):
                add(states[end], stop, ways, off)
        k = end
    # The text ends after the last token, or before it: one token it does not show (an
    # end-of-sequence token) after a known one, so no lost run can swallow text for it.
    last = n if len(data) in states[n] else n - 1
    if (
        last < 0
        or len(data) not in states[last]
        or states[last][len(data)][0] != 1
        or (last < n and (tokens[last].lost or (last > 0 and tokens[last - 1].lost)))
    ):
        return None
    offsets = [len(data)] * (n + 1)
    k, off = last, len(data)
    while k > 0:
        prev = states[k][off][1]
        start = k - 1
        while tokens[start].lost and start > 0 and tokens[start - 1].lost:
            start -= 1
        if not tokens[start].lost:
            start = k - 1
        offsets[start:k] = [prev] * (k - start)
        k, off = start, prev
    return offsets


def filled(tokens: list[TokenLogprob], text: str | None) -> list[TokenLogprob]:
    """The tokens with each lost one that is alone in its run rebuilt from the bytes its
    text gives it (a one-token step SGLang never scored): its key is then known, its
    logprobs are not. Unchanged where the tokens cannot be aligned with the text."""
    offsets = align(tokens, text) if text is not None and any(t.lost for t in tokens) else None
    if offsets is None or text is None:
        return tokens
    data, out = text.encode(), list(tokens)
    for i, t in enumerate(tokens):
        alone = (
            t.lost
            and not (i and tokens[i - 1].lost)
            and not (i + 1 < len(tokens) and tokens[i + 1].lost)
        )
        if alone:
            raw = data[offsets[i] : offsets[i + 1]]
            shown = raw.decode("utf-8", "replace")
            out[i] = TokenLogprob(
                token=shown,
                logprob=float("nan"),
                bytes=None if shown.encode() == raw else list(raw),
            )
    return out


def first_difference(
    drafter: list[TokenLogprob],
    baseline: list[TokenLogprob],
    drafter_text: str | None,
    baseline_text: str | None,
) -> tuple[int | None, str | None]:
    """The index of the first token where two outputs differ (None: none within the
    shorter list), and why it cannot be read there (None: both tokens are known)."""
    aligned: dict[str, list[int] | None] = {}
    n, i = min(len(drafter), len(baseline)), 0
    while i < n:
        if not (drafter[i].lost or baseline[i].lost):
            if drafter[i].key != baseline[i].key:
                return i, None
            i += 1
            continue
        j = i
        while j < n and (drafter[j].lost or baseline[j].lost):
            j += 1
        for side, tokens, text in (("d", drafter, drafter_text), ("b", baseline, baseline_text)):
            if side not in aligned:
                aligned[side] = None if text is None else align(tokens, text)
        od, ob = aligned["d"], aligned["b"]
        what = (
            f"the engine counted tokens {i}-{j - 1} but sent no logprobs for them on a"
            " side (SGLang drops a streamed step whose text is empty)"
        )
        if od is None or ob is None:
            return i, f"{what}, and its tokens cannot be aligned with its text by bytes"
        assert drafter_text is not None and baseline_text is not None
        if (
            od[i] != ob[i]
            or drafter_text.encode()[od[i] : od[j]] != baseline_text.encode()[ob[i] : ob[j]]
        ):
            return i, f"{what}, and the outputs differ among them"
        i = j
    return None, None
