"""Metric mapping and acceptance windows: real vLLM 0.32 captures, SGLang fixtures
written from SGLang's metric definitions (tests/fixtures/sglang/README.md)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness.dialects import Dialect
from harness.engines.readout.metrics import (
    MetricsParseError,
    acceptance_window,
    parse_metrics,
    scrape_metrics,
)
from harness.engines.running.process import free_port
from harness.records import EngineSnapshot

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def vllm_zero() -> EngineSnapshot:
    return EngineSnapshot(
        engine="vllm",
        drafts=0,
        draft_tokens=0,
        accepted_tokens=0,
        accepted_per_position=[0, 0, 0],
        generation_tokens=0,
    )


def test_vllm_ngram_capture_maps_every_counter() -> None:
    snap = parse_metrics(fixture("vllm/vllm-0.32-cpu-ngram-k3.metrics.txt"), "vllm")
    assert snap.engine == "vllm"
    assert (snap.drafts, snap.draft_tokens, snap.accepted_tokens) == (135, 360, 231)
    assert snap.accepted_per_position == [96, 78, 57]
    assert snap.generation_tokens == 576 and snap.prompt_tokens == 201
    assert snap.requests_finished == 6  # summed over finished_reason
    assert snap.preemptions == 0 and snap.running == 0 and snap.waiting == 0
    assert snap.kv_cache_usage == 0.0
    assert snap.engine_accept_length is None


def test_vllm_nodrafter_capture_has_no_speculation() -> None:
    snap = parse_metrics(fixture("vllm/vllm-0.32-cpu-nodrafter.metrics.txt"), "vllm")
    assert snap.drafts is None and snap.draft_tokens is None and snap.accepted_tokens is None
    assert snap.accepted_per_position is None
    assert snap.generation_tokens == 576
    assert acceptance_window(snap, snap) is None


def test_vllm_window_uses_vllms_formulas() -> None:
    after = parse_metrics(fixture("vllm/vllm-0.32-cpu-ngram-k3.metrics.txt"), "vllm")
    w = acceptance_window(vllm_zero(), after)
    assert w is not None
    assert w.acceptance_length == pytest.approx(1 + 231 / 135)
    assert w.acceptance_rate == pytest.approx(231 / 360)
    assert w.per_position_rates == pytest.approx([96 / 135, 78 / 135, 57 / 135])
    assert (w.drafts, w.draft_tokens, w.accepted, w.generation_tokens) == (135, 360, 231, 576)


def test_vllm_window_between_two_scrapes_is_a_delta() -> None:
    before = EngineSnapshot(
        engine="vllm",
        drafts=100,
        draft_tokens=300,
        accepted_tokens=150,
        accepted_per_position=[70, 50, 30],
        generation_tokens=400,
    )
    after = before.model_copy(
        update={
            "drafts": 110,
            "draft_tokens": 330,
            "accepted_tokens": 165,
            "accepted_per_position": [78, 54, 33],
            "generation_tokens": 430,
        }
    )
    w = acceptance_window(before, after)
    assert w is not None
    assert w.acceptance_length == pytest.approx(1 + 15 / 10)
    assert w.per_position_rates == pytest.approx([0.8, 0.4, 0.3])


def test_empty_window_has_no_length() -> None:
    snap = parse_metrics(fixture("vllm/vllm-0.32-cpu-ngram-k3.metrics.txt"), "vllm")
    w = acceptance_window(snap, snap)
    assert w is not None and w.drafts == 0
    assert w.acceptance_length is None and w.per_position_rates is None


def test_counter_reset_gives_no_window() -> None:
    after = parse_metrics(fixture("vllm/vllm-0.32-cpu-ngram-k3.metrics.txt"), "vllm")
    assert acceptance_window(after, vllm_zero()) is None
    # one per-position counter going back is a reset too
    back = after.model_copy(update={"accepted_per_position": [96, 77, 57]})
    assert acceptance_window(after, back) is None


def test_missing_series_gives_no_window_and_no_crash() -> None:
    text = fixture("vllm/vllm-0.32-cpu-ngram-k3.metrics.txt")
    without_accepted = "\n".join(
        line for line in text.splitlines() if "spec_decode_num_accepted_tokens_total" not in line
    )
    snap = parse_metrics(without_accepted, "vllm")
    assert snap.accepted_tokens is None and snap.drafts == 135
    assert acceptance_window(snap, snap) is None
    # only some series
    assert parse_metrics("", "vllm") == EngineSnapshot(engine="vllm")


def test_sglang_window_is_generated_over_verify_calls() -> None:
    t0 = parse_metrics(fixture("sglang/sglang-dflash.t0.metrics.txt"), "sglang")
    t1 = parse_metrics(fixture("sglang/sglang-dflash.t1.metrics.txt"), "sglang")
    assert t0.engine == "sglang"
    assert (t0.drafts, t0.generation_tokens, t0.prompt_tokens) == (402, 1210, 3100)
    assert t0.requests_finished == 10 and t1.preemptions == 1
    assert (t1.running, t1.waiting, t1.kv_cache_usage) == (4, 2, 0.18)
    assert t1.engine_accept_length == 3.9  # SGLang's own windowed gauge, kept as reported
    assert t0.draft_tokens is None and t0.accepted_per_position is None
    w = acceptance_window(t0, t1)
    assert w is not None and w.engine == "sglang"
    assert (w.drafts, w.generation_tokens) == (300, 1200)
    assert w.acceptance_length == pytest.approx(4.0)
    assert w.per_position_rates is None and w.accepted is None


def test_sglang_restart_and_nodrafter_give_no_window() -> None:
    t1 = parse_metrics(fixture("sglang/sglang-dflash.t1.metrics.txt"), "sglang")
    restarted = parse_metrics(fixture("sglang/sglang-dflash.restarted.metrics.txt"), "sglang")
    assert acceptance_window(t1, restarted) is None
    base = parse_metrics(fixture("sglang/sglang-nodrafter.metrics.txt"), "sglang")
    assert base.drafts is None and base.generation_tokens == 1210
    assert base.engine_accept_length == 0.0
    assert acceptance_window(base, base) is None


def test_bad_input() -> None:
    with pytest.raises(MetricsParseError):
        parse_metrics('vllm:generation_tokens_total{engine="0" 5\n', "vllm")
    with pytest.raises(ValueError, match="unknown metrics dialect"):
        parse_metrics("", "tgi")  # type: ignore[arg-type]  # not a dialect, on purpose
    t0 = parse_metrics(fixture("sglang/sglang-dflash.t0.metrics.txt"), "sglang")
    with pytest.raises(ValueError, match="different dialects"):
        acceptance_window(t0, vllm_zero())


class _Metrics(BaseHTTPRequestHandler):
    body = b""
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def metrics_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_scrape_ok_and_gaps(metrics_server) -> None:
    url = f"http://127.0.0.1:{metrics_server.server_address[1]}/metrics"
    _Metrics.status, _Metrics.body = 200, fixture("sglang/sglang-dflash.t0.metrics.txt").encode()
    ok = scrape_metrics(url, "sglang")
    assert ok.snapshot is not None
    assert ok.ok and ok.error is None and ok.snapshot.drafts == 402 and ok.took_s >= 0
    _Metrics.status = 503
    gap = scrape_metrics(url, "sglang")
    assert not gap.ok and gap.error == "HTTP 503"
    _Metrics.status, _Metrics.body = 200, b"this is { not prometheus"
    gap = scrape_metrics(url, "sglang")
    assert gap.error is not None
    assert not gap.ok and "not Prometheus text" in gap.error
    unreachable = scrape_metrics(f"http://127.0.0.1:{free_port()}/metrics", "vllm", timeout_s=2)
    assert unreachable.error is not None
    assert not unreachable.ok and "ConnectError" in unreachable.error


@pytest.mark.parametrize(
    "name", sorted(str(p.relative_to(FIXTURES)) for p in FIXTURES.glob("*/*.metrics.txt"))
)
def test_parsing_only_the_read_series_gives_the_full_parse(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scraper parses the lines of the series it reads (a tenth of the time, inside
    the client's event loop); every field must be what parsing the whole page gives."""
    import harness.engines.readout.metrics as metrics

    dialect: Dialect = "vllm" if name.startswith("vllm/") else "sglang"
    text = fixture(name)
    assert metrics._wanted_lines(text, dialect)  # the fast path is the one taken
    fast = parse_metrics(text, dialect)
    monkeypatch.setattr(metrics, "_wanted_lines", lambda text, dialect: "")
    assert fast == parse_metrics(text, dialect)


def test_a_page_with_none_of_the_read_series_is_parsed_whole() -> None:
    """HTML (a wrong port) still fails as not Prometheus; a valid page of other series is
    an empty snapshot."""
    with pytest.raises(MetricsParseError):
        parse_metrics("<html><body>vllm:generation_tokens_total</body></html>\n", "vllm")
    empty = parse_metrics("# TYPE other_total counter\nother_total 3\n", "vllm")
    assert empty.generation_tokens is None and empty.drafts is None
