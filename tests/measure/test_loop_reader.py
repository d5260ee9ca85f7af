"""Kernel-stamped connections are read in the event loop, not by a reader thread (issue 34)."""

from __future__ import annotations

import asyncio
import socket
import time

from harness.measure import arrival_stamps, transport


def test_a_kernel_stamped_stream_is_read_in_the_loop_with_its_arrival_stamp():
    async def main() -> tuple[bool, float, float | None, bytes]:
        with socket.socket() as listener:  # a loopback TCP pair, as an engine's stream
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            client = socket.create_connection(listener.getsockname())
            server, _ = listener.accept()
        client.setblocking(False)
        stream = transport.TimedStream(client, asyncio.get_running_loop())
        try:
            wrote = time.monotonic()
            server.send(b"data: x\n\n")
            data = await asyncio.wait_for(stream.read(65536), 5)
            # ...and the reader thread does not wait on it.
            assert stream.fd not in arrival_stamps.ReaderThread.get().streams
            return stream.in_loop, wrote, stream.last_arrival_t, data
        finally:
            await stream.aclose()
            server.close()

    in_loop, wrote, stamp, data = asyncio.run(main())
    assert data == b"data: x\n\n"
    assert in_loop, "a kernel-stamped connection must be read by the loop"
    assert stamp is not None and wrote - 0.5e-3 <= stamp <= time.monotonic()


def test_the_health_monitor_ticks_in_the_loop_when_the_loop_reads():
    """With kernel stamps read in the loop, the loop's own timer measures its lag and
    feeds the stamp-path probe: no second thread wakes 100 times a second for the GIL."""
    from harness.measure.health import ClientHealthMonitor

    async def main():
        monitor = ClientHealthMonitor(tick_s=0.01)
        monitor.start()
        await asyncio.sleep(0.1)
        threads = {t.name for t in __import__("threading").enumerate()}
        time.sleep(0.06)  # the loop held: the next tick is late by about this much
        await asyncio.sleep(0.1)
        health = await monitor.stop()
        return monitor, threads, health

    monitor, threads, health = asyncio.run(main())
    assert "specbench-lag-probe" not in threads
    assert monitor._stamp_probe is not None and monitor._stamp_probe.in_loop
    assert 12 <= len(monitor.loop_lags_ms) <= 22  # ~20 ticks of 10 ms, less the hold
    assert max(monitor.loop_lags_ms) >= 50
    assert len(monitor.lags_ms) >= 10 and health.lag_p99_ms < 5  # kernel stamps: exact


def _thread_read(monkeypatch, recv=None) -> tuple[bool, bytes | Exception]:
    """A loopback stream read by a fresh reader thread (no kernel stamps)."""
    monkeypatch.setattr(arrival_stamps, "KERNEL_STAMPS", False)
    monkeypatch.setattr(arrival_stamps.ReaderThread, "_instance", None)
    if recv is not None:
        monkeypatch.setattr(arrival_stamps.ReaderThread, "recv", recv)

    async def main() -> tuple[bool, bytes | Exception]:
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            client = socket.create_connection(listener.getsockname())
            server, _ = listener.accept()
        client.setblocking(False)
        stream = transport.TimedStream(client, asyncio.get_running_loop())
        try:
            server.send(b"data: x\n\n")
            try:
                got: bytes | Exception = await asyncio.wait_for(stream.read(65536), 5)
            except Exception as err:  # noqa: BLE001 - the test reads what was raised
                got = err
            return stream.in_loop, got
        finally:
            await stream.aclose()
            server.close()

    return asyncio.run(main())


def test_a_thread_stamped_stream_is_read_by_the_reader_thread(monkeypatch):
    in_loop, got = _thread_read(monkeypatch)
    assert not in_loop
    assert got == b"data: x\n\n"


def test_a_reader_thread_that_fails_fails_its_streams_instead_of_leaving_them_waiting(monkeypatch):
    import httpcore

    def broken_recv(self, *args, **kwargs):
        raise RuntimeError("a bug in the stamping code")

    _, got = _thread_read(monkeypatch, recv=broken_recv)
    assert isinstance(got, httpcore.ReadError), got
    assert "stream-reading thread failed" in str(got) and "a bug in the stamping" in str(got)
