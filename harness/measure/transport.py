"""An httpx client whose connections stamp every received segment with its arrival time.

With plain httpx a chunk's time is taken when the reading task next runs, which at 64
streams is after the tasks woken before it have parsed their chunks: a burst of chunks
from one engine step would be stamped milliseconds apart. Here the stamp is taken in
the transport's data_received callback, the first Python code that sees the bytes, and
httpx reads them afterwards. httpx stays the one HTTP client; only its network backend
(the documented httpcore extension point) is ours. Plain http only: an https URL gets
the stock backend, and chunk times fall back to the moment the task reads them.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import time
from collections import deque

import httpcore
import httpx

# httpcore imports sniffio afresh for every lock it sets up (several per request); when
# sniffio is not installed each attempt scans sys.path on disk, inside the event loop.
# Cache the miss once, so the import fails at once and httpcore assumes asyncio.
if importlib.util.find_spec("sniffio") is None:
    sys.modules.setdefault("sniffio", None)


class _TimedProtocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.segments: deque[tuple[float, bytes]] = deque()
        self.closed = False
        self.error: BaseException | None = None
        self.waiter: asyncio.Future | None = None
        self.transport: asyncio.Transport | None = None
        self.can_write: asyncio.Event = asyncio.Event()
        self.can_write.set()

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.segments.append((time.monotonic(), data))
        self._wake()

    def eof_received(self) -> bool:
        self.closed = True
        self._wake()
        return False

    def connection_lost(self, exc: BaseException | None) -> None:
        self.closed, self.error = True, exc
        self.can_write.set()
        self._wake()

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


class TimedStream(httpcore.AsyncNetworkStream):
    """A TCP stream that remembers when the bytes it last returned arrived."""

    def __init__(self, transport: asyncio.Transport, protocol: _TimedProtocol) -> None:
        self._transport, self._protocol = transport, protocol
        self.last_arrival_t: float | None = None

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        proto = self._protocol
        while not proto.segments and not proto.closed:
            # No per-read timer (wait_for costs a task and a timer per chunk): the
            # driver bounds each whole request with one asyncio.timeout.
            proto.waiter = asyncio.get_running_loop().create_future()
            try:
                await proto.waiter
            finally:
                proto.waiter = None
        if proto.segments:
            t, data = proto.segments.popleft()
            if len(data) > max_bytes:
                proto.segments.appendleft((t, data[max_bytes:]))
                data = data[:max_bytes]
            self.last_arrival_t = t
            return data
        if proto.error is not None:
            raise httpcore.ReadError(str(proto.error))
        return b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if self._protocol.closed:
            raise httpcore.WriteError("connection closed")
        self._transport.write(buffer)
        if not self._protocol.can_write.is_set():
            try:
                await asyncio.wait_for(self._protocol.can_write.wait(), timeout)
            except TimeoutError as err:
                raise httpcore.WriteTimeout("write timed out") from err

    async def aclose(self) -> None:
        self._transport.close()

    async def start_tls(self, ssl_context, server_hostname=None, timeout=None):
        raise httpcore.ConnectError("the timed backend serves plain http only")

    def get_extra_info(self, info: str):
        if info == "is_readable":  # httpcore asks this of idle connections: closed by peer?
            return self._protocol.closed or bool(self._protocol.segments)
        if info in ("socket", "client_addr", "server_addr"):
            key = {"client_addr": "sockname", "server_addr": "peername"}.get(info, info)
            return self._transport.get_extra_info(key)
        return None


class TimedBackend(httpcore.AsyncNetworkBackend):
    async def connect_tcp(self, host, port, timeout=None, local_address=None,
                          socket_options=None) -> TimedStream:
        loop = asyncio.get_running_loop()
        local = (local_address, 0) if local_address else None
        try:
            transport, protocol = await asyncio.wait_for(
                loop.create_connection(_TimedProtocol, host, port, local_addr=local), timeout)
        except TimeoutError as err:
            raise httpcore.ConnectTimeout(f"connect to {host}:{port} timed out") from err
        except OSError as err:
            raise httpcore.ConnectError(str(err)) from err
        return TimedStream(transport, protocol)

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise httpcore.ConnectError("unix sockets are not supported by the timed backend")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class _TimedTransport(httpx.AsyncHTTPTransport):
    def __init__(self, limits: httpx.Limits) -> None:
        # verify=False only spares building a CA store (~50 ms) this plain-http
        # transport never uses; start_tls is refused above.
        super().__init__(limits=limits, trust_env=False, verify=False)
        # The stock pool with our backend; everything else (HTTP/1.1, pooling) is httpcore's.
        self._pool = httpcore.AsyncConnectionPool(
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=TimedBackend(),
        )


def make_client(base_url: str, connections: int, timeout_s: float) -> httpx.AsyncClient:
    """An httpx client with `connections` keep-alive connections."""
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections,
                          keepalive_expiry=60.0)
    timeout = httpx.Timeout(timeout_s)
    if base_url.startswith("http://"):
        return httpx.AsyncClient(transport=_TimedTransport(limits), timeout=timeout,
                                 trust_env=False)
    return httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False,
                             verify=shared_ssl_context())


_SSL_CONTEXT = None


def shared_ssl_context():
    """One verified TLS context for every https client (each costs ~50 ms to build)."""
    global _SSL_CONTEXT
    if _SSL_CONTEXT is None:
        _SSL_CONTEXT = httpx.create_ssl_context()
    return _SSL_CONTEXT


def arrival_time(response: httpx.Response) -> float:
    """When the bytes the response just yielded reached this process."""
    stream = response.extensions.get("network_stream")
    t = getattr(stream, "last_arrival_t", None)
    return t if t is not None else time.monotonic()


class ConnectionSlots:
    """`n` single-connection clients, lent out one request at a time.

    The pool is sized to the load (one slot per closed-loop user, max_in_flight for
    open loop). One httpx pool of n connections would do the same job, but httpcore
    scans every connection for every request event: at 64 streams that scan alone
    held the event loop for milliseconds. Waiting for a free slot is client queueing.
    """

    def __init__(self, base_url: str, n: int, timeout_s: float) -> None:
        # Made before the cell starts, so their set-up is not charged to it.
        self._clients = [make_client(base_url, 1, timeout_s) for _ in range(n)]
        self._free: asyncio.Queue[httpx.AsyncClient] = asyncio.Queue()
        for client in self._clients:
            self._free.put_nowait(client)

    async def acquire(self) -> httpx.AsyncClient:
        return await self._free.get()

    def release(self, client: httpx.AsyncClient) -> None:
        self._free.put_nowait(client)

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()
