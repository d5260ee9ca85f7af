"""Engine /metrics -> specbench's names, and acceptance over a window.

The one place that knows the engines' metric names. Sources:
- vLLM 0.32: vllm/v1/spec_decode/metrics.py and vllm/v1/metrics/loggers.py
  (`vllm:spec_decode_*` counters exist only with a speculative config).
- SGLang: python/sglang/srt/observability/metrics_collector.py
  (TokenizerMetricsCollector: generation_tokens_total, spec_verify_calls_total,
  num_requests_total, all incremented when a request finishes;
  SchedulerMetricsCollector: the gauges, spec_accept_length among them).
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, ConfigDict

from harness.dialects import DIALECTS, Dialect
from harness.records import EngineSnapshot
from harness.tls import shared_ssl_context


class MetricsParseError(ValueError):
    """The text is not Prometheus exposition format."""


# Snapshot field -> sample name, per dialect. Counters are summed over label sets
# (several engine cores or ranks each report their own series).
_COUNTERS: dict[Dialect, dict[str, str]] = {
    "vllm": {
        "drafts": "vllm:spec_decode_num_drafts_total",
        "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
        "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
        "generation_tokens": "vllm:generation_tokens_total",
        "prompt_tokens": "vllm:prompt_tokens_total",
        "preemptions": "vllm:num_preemptions_total",
        "requests_finished": "vllm:request_success_total",
    },
    "sglang": {
        # One verify call per drafting round: SGLang's equivalent of vLLM's drafts.
        "drafts": "sglang:spec_verify_calls_total",
        "generation_tokens": "sglang:generation_tokens_total",
        "prompt_tokens": "sglang:prompt_tokens_total",
        "preemptions": "sglang:num_retracted_requests_total",
        "requests_finished": "sglang:num_requests_total",
    },
}
_GAUGES: dict[Dialect, dict[str, str]] = {
    "vllm": {
        "running": "vllm:num_requests_running",
        "waiting": "vllm:num_requests_waiting",
        "kv_cache_usage": "vllm:kv_cache_usage_perc",  # a 0..1 fraction despite its name
    },
    "sglang": {
        "running": "sglang:num_running_reqs",
        "waiting": "sglang:num_queue_reqs",
        "kv_cache_usage": "sglang:token_usage",
        "engine_accept_length": "sglang:spec_accept_length",
    },
}
# Gauges that are a level, not a count: averaged over label sets, never summed.
_MEAN_GAUGES = {"kv_cache_usage", "engine_accept_length"}
_VLLM_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


def speculation_counter(dialect: Dialect) -> str:
    """The counter of drafting rounds a drafter arm's engine must export (the snapshot's
    `drafts`): vllm:spec_decode_num_drafts_total, sglang:spec_verify_calls_total."""
    return _COUNTERS[dialect]["drafts"]


def counter_name(dialect: Dialect, field: str) -> str:
    """The engine's own name of a snapshot counter (for messages: the smoke stage names
    `vllm:spec_decode_num_drafts_total` or `sglang:spec_verify_calls_total`)."""
    return _COUNTERS[dialect][field]


def parse_metrics(text: str, dialect: Dialect) -> EngineSnapshot:
    """Map one /metrics text to an EngineSnapshot; absent series stay None.

    Raises MetricsParseError on text that is not Prometheus format and ValueError
    on an unknown dialect.
    """
    if dialect not in _COUNTERS:
        raise ValueError(
            f"unknown metrics dialect {dialect!r} (expected one of: {', '.join(DIALECTS)})"
        )
    samples: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    # The full page takes ~10 ms to parse (52 KB from vLLM 0.32): inside a cell that is
    # the client's event loop held once a second. Parse only the series read here; a
    # page with none of them is parsed whole, so text that is not Prometheus still fails.
    wanted = _wanted_lines(text, dialect)
    try:
        for family in text_string_to_metric_families(wanted or text):
            for sample in family.samples:
                samples[sample.name].append((sample.labels, float(sample.value)))
    except Exception as err:  # the parser raises ValueError, TypeError, IndexError...
        raise MetricsParseError(f"not Prometheus text: {err}") from err

    def total(name: str) -> float | None:
        rows = samples.get(name)
        return sum(v for _, v in rows) if rows else None

    def mean(name: str) -> float | None:
        rows = samples.get(name)
        return sum(v for _, v in rows) / len(rows) if rows else None

    fields: dict[str, Any] = {"engine": dialect}
    for field, name in _COUNTERS[dialect].items():
        fields[field] = total(name)
    for field, name in _GAUGES[dialect].items():
        fields[field] = mean(name) if field in _MEAN_GAUGES else total(name)
    if dialect == "vllm":
        fields["accepted_per_position"] = _per_position(samples.get(_VLLM_PER_POSITION, []))
    return EngineSnapshot(**fields)


def _sample_names(dialect: Dialect) -> frozenset[str]:
    names = set(_COUNTERS[dialect].values()) | set(_GAUGES[dialect].values())
    if dialect == "vllm":
        names.add(_VLLM_PER_POSITION)
    return frozenset(names)


_WANTED = {dialect: _sample_names(dialect) for dialect in _COUNTERS}
# A family's name in its "# TYPE" line drops a counter's "_total".
_WANTED_FAMILIES = {
    dialect: frozenset(n.removesuffix("_total") for n in names) | names
    for dialect, names in _WANTED.items()
}


def _wanted_lines(text: str, dialect: Dialect) -> str:
    """The lines of `text` that carry (or declare) a series parse_metrics reads; "" when
    no sample line does."""
    names, families = _WANTED[dialect], _WANTED_FAMILIES[dialect]
    kept: list[str] = []
    any_sample = False
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE") and parts[2] in families:
                kept.append(line)
            continue
        end = len(line)
        for stop in ("{", " "):
            at = line.find(stop)
            if at != -1:
                end = min(end, at)
        if line[:end] in names:
            kept.append(line)
            any_sample = True
    return "\n".join(kept) + "\n" if any_sample else ""


def _per_position(rows: list[tuple[dict[str, str], float]]) -> list[float] | None:
    by_pos: dict[int, float] = defaultdict(float)
    for labels, value in rows:
        try:
            by_pos[int(labels["position"])] += value
        except (KeyError, ValueError):
            continue
    if not by_pos:
        return None
    return [by_pos.get(i, 0.0) for i in range(max(by_pos) + 1)]


class AcceptanceWindow(BaseModel):
    """Speculation between two snapshots, from counter deltas.

    acceptance_length is tokens per drafting round: vLLM 1 + accepted/drafts;
    SGLang generated/verify calls (its own definition; the counters move when
    requests finish, so short windows are lumpy). per_position_rates[i] is the
    share of rounds that kept at least i + 1 drafts (vLLM only).
    """

    model_config = ConfigDict(extra="forbid")

    engine: Dialect
    drafts: float
    draft_tokens: float | None = None
    accepted: float | None = None
    generation_tokens: float | None = None
    acceptance_length: float | None = None  # None when the window holds no drafts
    acceptance_rate: float | None = None  # accepted / draft_tokens (vLLM)
    per_position_rates: list[float] | None = None


def _delta(before: float | None, after: float | None) -> float | None:
    if before is None or after is None:
        return None
    return after - before


def acceptance_window(before: EngineSnapshot, after: EngineSnapshot) -> AcceptanceWindow | None:
    """Acceptance between two scrapes of one engine; None when a counter went
    backwards (the engine restarted) or the engine exports no speculation series."""
    if before.engine != after.engine:
        raise ValueError(f"snapshots from different dialects: {before.engine}, {after.engine}")
    drafts = _delta(before.drafts, after.drafts)
    generated = _delta(before.generation_tokens, after.generation_tokens)
    draft_tokens = _delta(before.draft_tokens, after.draft_tokens)
    accepted = _delta(before.accepted_tokens, after.accepted_tokens)
    per_pos = None
    if before.accepted_per_position is not None and after.accepted_per_position is not None:
        n = max(len(before.accepted_per_position), len(after.accepted_per_position))
        b = before.accepted_per_position + [0.0] * (n - len(before.accepted_per_position))
        a = after.accepted_per_position + [0.0] * (n - len(after.accepted_per_position))
        per_pos = [x - y for x, y in zip(a, b, strict=True)]
    if drafts is None:
        return None
    if any(v is not None and v < 0 for v in (drafts, generated, draft_tokens, accepted)):
        return None
    if per_pos is not None and any(v < 0 for v in per_pos):
        return None

    length = rate = rates = None
    if before.engine == "vllm":
        if accepted is None:
            return None
        if drafts > 0:
            length = 1.0 + accepted / drafts
            rates = [x / drafts for x in per_pos] if per_pos is not None else None
        if draft_tokens:
            rate = accepted / draft_tokens
    else:
        if generated is None:
            return None
        if drafts > 0:
            length = generated / drafts
    return AcceptanceWindow(
        engine=before.engine,
        drafts=drafts,
        draft_tokens=draft_tokens,
        accepted=accepted,
        generation_tokens=generated,
        acceptance_length=length,
        acceptance_rate=rate,
        per_position_rates=rates,
    )


@dataclass(frozen=True)
class ScrapeResult:
    """One scrape attempt: a snapshot, or why there is a gap."""

    snapshot: EngineSnapshot | None
    error: str | None
    took_s: float

    @property
    def ok(self) -> bool:
        return self.snapshot is not None


def scrape_metrics(
    url: str, dialect: Dialect, *, timeout_s: float = 5.0, client: httpx.Client | None = None
) -> ScrapeResult:
    """GET /metrics and parse it; never raises for an engine-side problem."""
    start = time.monotonic()
    try:
        if client is not None:
            response = client.get(url, timeout=timeout_s)
        else:
            response = httpx.get(url, timeout=timeout_s, verify=shared_ssl_context())
        if response.status_code != 200:
            return ScrapeResult(None, f"HTTP {response.status_code}", time.monotonic() - start)
        snapshot = parse_metrics(response.text, dialect)
    except httpx.HTTPError as err:
        return ScrapeResult(None, f"{type(err).__name__}: {err}", time.monotonic() - start)
    except MetricsParseError as err:
        return ScrapeResult(None, str(err), time.monotonic() - start)
    return ScrapeResult(snapshot, None, time.monotonic() - start)
