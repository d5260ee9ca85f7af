"""Kernel-stamped connections are read in the event loop, not by a reader thread (issue 34)."""

from __future__ import annotations

import asyncio
import socket
import time

from harness.measure import transport


def test_a_kernel_stamped_stream_is_read_in_the_loop_with_its_arrival_stamp():
    async def main() -> tuple[bool, float, float, bytes]:
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
            assert stream.fd not in transport._ReaderThread.get().streams
            return stream.in_loop, wrote, stream.last_arrival_t, data
        finally:
            await stream.aclose()
            server.close()

    in_loop, wrote, stamp, data = asyncio.run(main())
    assert data == b"data: x\n\n"
    assert in_loop, "a kernel-stamped connection must be read by the loop"
    assert wrote - 0.5e-3 <= stamp <= time.monotonic()
