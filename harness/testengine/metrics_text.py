"""The scripted engine's /metrics, in the real engines' exposition format.

Names, labels and HELP texts follow vLLM 0.32 (/work/shared/fixtures/*.metrics.txt) and
SGLang (ENGINES.md), so the one metric parser (harness.engines.readout.metrics) reads this text
exactly as it reads theirs. prometheus_client writes it, as it does inside both engines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from harness.dialects import Dialect


@dataclass
class EngineCounters:
    """Cumulative since engine start, plus the gauges of the moment."""

    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    generation_tokens: int = 0
    prompt_tokens: int = 0
    requests_finished: dict[str, int] = field(default_factory=dict)
    requests_total: int = 0
    running: int = 0
    waiting: int = 0
    kv_cache_usage: float = 0.0
    recent_accept_length: float = 0.0  # SGLang's windowed gauge


class _Collector:
    def __init__(
        self,
        counters: EngineCounters,
        dialect: Dialect,
        model: str,
        k: int,
        created: float,
        omit: frozenset[str] = frozenset(),
    ) -> None:
        self.c, self.dialect, self.model, self.k, self.created = (
            counters,
            dialect,
            model,
            k,
            created,
        )
        self.omit = omit

    def collect(self):
        families = self._vllm() if self.dialect == "vllm" else self._sglang()
        # A counter family is named without its samples' "_total".
        return (
            f for f in families if f.name not in self.omit and f.name + "_total" not in self.omit
        )

    def _counter(self, name, doc, value, labels=(), extra=()):
        fam = CounterMetricFamily(name, doc, labels=["engine", "model_name", *labels])
        for lv, v in extra or [((), value)]:
            fam.add_metric(["0", self.model, *lv], v, created=self.created)
        return fam

    def _gauge(self, name, doc, value, base=("engine", "model_name")):
        fam = GaugeMetricFamily(name, doc, labels=list(base))
        fam.add_metric(["0", self.model][: len(base)], value)
        return fam

    def _vllm(self):
        c = self.c
        if self.k:
            yield self._counter(
                "vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", c.drafts
            )
            yield self._counter(
                "vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", c.draft_tokens
            )
            yield self._counter(
                "vllm:spec_decode_num_accepted_tokens",
                "Number of accepted tokens.",
                c.accepted_tokens,
            )
            per_pos = [((str(i),), float(v)) for i, v in enumerate(c.accepted_per_position)]
            yield self._counter(
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "Accepted tokens per draft position.",
                0,
                labels=["position"],
                extra=per_pos,
            )
        yield self._gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", c.running
        )
        yield self._gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", c.waiting
        )
        yield self._gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            c.kv_cache_usage,
        )
        yield self._counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.", 0
        )
        yield self._counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", c.prompt_tokens
        )
        yield self._counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", c.generation_tokens
        )
        reasons = ["stop", "length", "abort", "error", "repetition"]
        yield self._counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            0,
            labels=["finished_reason"],
            extra=[((r,), float(c.requests_finished.get(r, 0))) for r in reasons],
        )

    def _sglang(self):
        c = self.c
        base = ("model_name",)

        def counter(name, doc, value):
            fam = CounterMetricFamily(name, doc, labels=list(base))
            fam.add_metric([self.model], value, created=self.created)
            return fam

        yield counter(
            "sglang:prompt_tokens", "Number of prefill tokens processed.", c.prompt_tokens
        )
        yield counter(
            "sglang:generation_tokens",
            "Number of generation tokens processed.",
            c.generation_tokens,
        )
        yield counter("sglang:num_requests", "Number of requests processed.", c.requests_total)
        if self.k:
            yield counter(
                "sglang:spec_verify_calls", "The number of verification forward calls.", c.drafts
            )
            yield self._gauge(
                "sglang:spec_accept_length",
                "The average acceptance length.",
                c.recent_accept_length,
                base,
            )
            rate = (c.recent_accept_length - 1.0) / self.k if c.recent_accept_length else 0.0
            yield self._gauge("sglang:spec_accept_rate", "The average acceptance rate.", rate, base)
        yield self._gauge(
            "sglang:num_running_reqs", "The number of running requests.", c.running, base
        )
        yield self._gauge(
            "sglang:num_queue_reqs", "The number of requests in the waiting queue.", c.waiting, base
        )
        yield self._gauge("sglang:token_usage", "The token usage.", c.kv_cache_usage, base)


def metrics_text(
    counters: EngineCounters,
    dialect: Dialect,
    model: str,
    k: int,
    created: float,
    omit: list[str] | tuple[str, ...] = (),
) -> bytes:
    """The /metrics page; `omit` names series to leave out (an engine release without them)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(counters, dialect, model, k, created, frozenset(omit)))
    return generate_latest(registry)


def exported_series(dialect: Dialect) -> list[str]:
    """The series names (counters with their `_total`) a drafting engine of this
    dialect exports: what ScriptedEngineSpec.omit_series may name."""
    families = _Collector(EngineCounters(accepted_per_position=[0]), dialect, "m", 1, 0.0).collect()
    return [f.name + "_total" if f.type == "counter" else f.name for f in families]
