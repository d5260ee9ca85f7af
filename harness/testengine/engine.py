"""The scripted engine's scheduler: a continuous-batching step loop that follows a spec.

Each step admits waiting requests (up to max_batch), lasts the roofline time of the
tokens it processes, and then hands every running request its tokens: 1 from prefill,
then 1 + the accepted drafts per verification step. Every chunk's true send time is
written to the truth log (harness.testengine.truth).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import deque
from typing import IO

from harness.testengine import chunks, output, truth
from harness.testengine.metrics_text import EngineCounters
from harness.testengine.sequence import Sequence
from harness.testengine.spec import FailureInjection, ScriptedEngineSpec
from harness.testengine.tokens import StreamedText, token_bytes


class ScriptedEngine:
    def __init__(
        self, spec: ScriptedEngineSpec, truth_log: IO[str] | None = None, on_die=None
    ) -> None:
        self.spec = spec
        self.truth = truth_log
        self.on_die = on_die
        self.rng = random.Random(spec.seed)
        self.fail_rng = random.Random(spec.seed + 1)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.counters = EngineCounters(accepted_per_position=[0] * spec.num_draft_tokens)
        self.created_wall = time.time()
        self._arrivals = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._recent_lengths: deque[int] = deque(maxlen=40)
        # vLLM counts speculation and output every step; SGLang's tokenizer-side counters
        # move only when a request finishes (so its short windows are lumpy).
        self._per_step_counters = spec.metrics_dialect == "vllm"
        self._count_spec = not spec.frozen_spec_counters
        self._step_k = spec.num_draft_tokens  # the running step's (spec.k_at its batch)

    # --- admission -------------------------------------------------------------
    def next_number(self) -> int:
        self._arrivals += 1
        return self._arrivals

    def failure_for(self, number: int) -> FailureInjection | None:
        for f in self.spec.failures:
            hit = (
                number in f.requests
                or (f.every_nth is not None and number % f.every_nth == 0)
                or (f.probability > 0 and self.fail_rng.random() < f.probability)
            )
            if hit:
                return f
        return None

    def submit(self, seq: Sequence) -> asyncio.Future:
        """Queue the request; the future is done when it has finished."""
        done = seq.done = asyncio.get_running_loop().create_future()
        self.waiting.append(seq)
        self.counters.requests_total += 1
        self._wake.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())
        return done

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    # --- the step loop ------------------------------------------------------------
    async def _loop(self) -> None:
        spec, k = self.spec, self.spec.num_draft_tokens
        deadline: float | None = None  # when the previous step was due to end
        while True:
            if not self.running and not self.waiting:
                self._wake.clear()
                self._update_gauges()
                await self._wake.wait()
                deadline = None
            # Back to back, a step starts when the last one was due to end, not when its
            # handing-out finished or the sleep overshot: steps keep their declared length
            # on a loaded host (a declared 10 ms round over an 8 ms step stays 1.25).
            start = time.monotonic() if deadline is None else deadline
            prefill = 0
            while self.waiting and len(self.running) < spec.max_batch:
                seq = self.waiting.popleft()
                self.running.append(seq)
                prefill += seq.prompt_tokens
            # The step's k: the drafter's, or its schedule's at this running batch.
            k = self._step_k = spec.k_at(len(self.running))
            decode = sum(k + 1 if k else 1 for s in self.running if s.prefilled)
            self._update_gauges()
            deadline = start + spec.step_seconds(decode, prefill)
            delay = deadline - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                deadline = time.monotonic()  # fell a whole step behind: no catching up
            for seq in list(self.running):
                self._advance(seq)
            self._update_gauges()

    def _update_gauges(self) -> None:
        c = self.counters
        c.running, c.waiting = len(self.running), len(self.waiting)
        used = sum(s.prompt_tokens + s.generated for s in self.running)
        c.kv_cache_usage = min(1.0, used / self.spec.kv_capacity_tokens)
        if self._recent_lengths:
            c.recent_accept_length = sum(self._recent_lengths) / len(self._recent_lengths)

    def _draw_tokens(self, seq: Sequence) -> int:
        """Tokens this step gives the request (before max_tokens and EOS)."""
        if not seq.prefilled:
            seq.prefilled = True
            self.counters.prompt_tokens += seq.prompt_tokens
            return 1
        k = self._step_k
        if not k:
            return 1
        if self.spec.accept_draws == "even":
            return 1 + self._even_accepts(seq, k)
        accepted = 0
        for p in (self.spec.accept_probs or [])[:k]:
            if self.rng.random() >= p:
                break
            accepted += 1
        return 1 + accepted

    def _even_accepts(self, seq: Sequence, k: int) -> int:
        """Drafts kept this round when position i is kept in exactly rate_i of rounds:
        each position accrues its unconditional rate every round and is kept when a whole
        round is owed (positions are nested, so a later one is only kept after the ones
        before it)."""
        rates = self.spec.position_rates()
        if not seq.owed:
            seq.owed = [0.0] * len(rates)
        rates = rates[:k]  # a step of a k schedule drafts fewer
        accepted = 0
        for i, rate in enumerate(rates):
            seq.owed[i] += rate
            if accepted == i and seq.owed[i] >= 1.0 - 1e-9:
                seq.owed[i] -= 1.0
                accepted += 1
        return accepted

    def _advance(self, seq: Sequence) -> None:
        if seq.sink.gone:  # the client went away: the engine aborts the request
            self._finish(seq, "abort", error="client disconnected")
            return
        was_prefilled = seq.prefilled
        n = min(self._draw_tokens(seq), seq.max_tokens - seq.generated)
        finish = None
        if not seq.ignore_eos and self.spec.eos_probability:
            for i in range(n):
                if self.rng.random() < self.spec.eos_probability:
                    n, finish = i + 1, "stop"
                    break
        if was_prefilled and self._step_k:
            # A verification step: count what was kept of this step's drafts.
            k = self._step_k
            if self._per_step_counters and self._count_spec:
                c = self.counters
                c.drafts += 1
                c.draft_tokens += k
                c.accepted_tokens += n - 1
                for i in range(n - 1):
                    c.accepted_per_position[i] += 1
            seq.drafts += 1
            seq.draft_tokens += k
            seq.accepted += n - 1
            if not seq.histogram:
                seq.histogram = [0] * (self.spec.num_draft_tokens + 1)
            seq.histogram[n - 1] += 1
            self._recent_lengths.append(n)
        f = seq.failure
        if f is not None and f.mode != "refuse" and seq.generated + n >= f.after_tokens:
            n = max(0, f.after_tokens - seq.generated)
            seq.generated += n
            if self._per_step_counters:
                self.counters.generation_tokens += n
            if n:
                self._emit(seq, n, None)
            self._fail(seq, f)
            return
        seq.generated += n
        if self._per_step_counters:
            self.counters.generation_tokens += n
        if finish is None and seq.generated >= seq.max_tokens:
            finish = "length"
        self._emit(seq, n, finish)

    def _emit(self, seq: Sequence, n: int, finish: str | None) -> None:
        """Send this step's tokens (and, when finishing, the end of the stream)."""
        spec = self.spec
        ids = output.output_ids(spec, seq, n)
        seq.text.extend(token_bytes(t) for t in ids)
        if seq.logprobs:
            seq.scores.extend(output.output_scores(spec, seq, n))
        if not seq.stream:
            if finish is not None:
                self._finish(seq, finish)
            return
        done_so_far = seq.generated - n
        if spec.chunking == "per_request":
            if finish is None:
                return  # held back: the whole output leaves in one write at the end
            groups, done_so_far = [list(seq.text)], 0
        elif spec.chunking == "per_step":
            groups = [[token_bytes(t) for t in ids]]
        else:
            groups = [[token_bytes(t)] for t in ids]
        if seq.streamed is None:
            seq.streamed = StreamedText(sglang=spec.metrics_dialect == "sglang")
        out: list[bytes] = []
        sizes: list[int] = []
        for gi, group in enumerate(groups):
            scored = seq.scores[done_so_far : done_so_far + len(group)] if seq.logprobs else None
            done_so_far += len(group)
            last = gi == len(groups) - 1
            text = seq.streamed.delta(b"".join(group), last and finish is not None)
            if not text and seq.streamed.sglang and not (last and finish is not None):
                seq.unsent += len(group)  # SGLang sends no chunk: these logprobs are lost
                continue
            use = chunks.usage(seq.prompt_tokens, done_so_far) if seq.continuous_usage else None
            out.append(
                chunks.sse(
                    chunks.stream_chunk(
                        seq.rid,
                        spec.served_model,
                        {"content": text},
                        finish if last else None,
                        use,
                        scored,
                    )
                )
            )
            sizes.append(len(group) + seq.unsent)
            seq.unsent = 0
        if not out:
            return
        position = seq.generated - n + 1  # this step's first token, 1-based
        if spec.flush_every_steps > 1 and (position >= spec.flush_from_token or seq.held):
            # held until N steps are waiting or the stream ends
            seq.held.append((b"".join(out), sizes))
            if finish is None and len(seq.held) < spec.flush_every_steps:
                return
            out = [b"".join(data for data, _ in seq.held)]
            sizes = [n for _, step_sizes in seq.held for n in step_sizes]
            seq.held.clear()
        payload_began = time.monotonic()  # with t, brackets the write: the kernel stamps inside it
        if finish is not None:
            out.append(output.closing_events(self.spec, seq))
            t = seq.sink.finish(b"".join(out))
        else:
            t = seq.sink.send(b"".join(out))
        self._log_chunks(seq, sizes, t, payload_began)
        if finish is not None:
            self._finish(seq, finish, end_t=t)

    def _log_chunks(
        self, seq: Sequence, sizes: list[int], t: float, began: float | None = None
    ) -> None:
        if seq.first_t is None and sizes:
            seq.first_t = t
        if self.truth is not None:
            truth.log_chunks(self.truth, seq, sizes, t, began)

    def _fail(self, seq: Sequence, f: FailureInjection) -> None:
        if f.mode == "drop":
            seq.sink.abort()
        elif f.mode == "malformed":
            seq.sink.send(b'data: {"id": "' + seq.rid.encode() + b'", "choices": [{"delta\n\n')
            # The stream goes on after the bad chunk; the client must still flag it.
            seq.failure = None
            return
        elif f.mode == "stall":
            asyncio.get_running_loop().call_later(f.stall_s, seq.sink.abort)
        self._finish(seq, "error", error=f.mode)
        if f.mode == "die" and self.on_die is not None:
            self.on_die()

    def _finish(
        self, seq: Sequence, reason: str, end_t: float | None = None, error: str | None = None
    ) -> None:
        if seq in self.running:
            self.running.remove(seq)
        if not seq.stream and error is None:
            extra = output.spec_extra(self.spec, seq)
            text = b"".join(seq.text).decode("utf-8", "replace")
            body = chunks.completion(
                seq.rid,
                self.spec.served_model,
                text,
                reason,
                chunks.usage(seq.prompt_tokens, seq.generated),
                extra,
                seq.scores if seq.logprobs else None,
            )
            end_t = seq.sink.finish(json.dumps(body).encode())
            seq.first_t = end_t
        if not self._per_step_counters:
            self.counters.generation_tokens += seq.generated
            if self._count_spec:
                self.counters.drafts += seq.drafts
        bucket = reason if error is None else ("abort" if reason == "abort" else "error")
        self.counters.requests_finished[bucket] = self.counters.requests_finished.get(bucket, 0) + 1
        if self.truth is not None:
            end_t = end_t if end_t is not None else time.monotonic()
            truth.log_request(self.truth, seq, reason, end_t, error)
        if seq.done is not None and not seq.done.done():
            seq.done.set_result(error)
