"""An httpx client whose connections stamp every received segment with its arrival time.

With plain httpx a chunk's time is taken when the reading task next runs. At 64 streams
an engine step sends 64 chunks at once, and the event loop only looks for new bytes
between rounds of work, so a chunk would be stamped after the parsing of the chunks
before it: milliseconds late. Here each connection's bytes are read with their arrival
stamp as soon as they are readable (arrival_stamps.py: the kernel's stamp, else a reader
thread's); httpx parses them whenever the loop gets to it, and the stamp stays right
however late the read. This module is the client side: the timed stream and network
backend, the first write held until its send time, and the connection slots a load
draws from.

httpx stays the one HTTP client; only its network backend (the documented httpcore
extension point) is ours. Plain http only: an https URL gets the stock backend, and
chunk times fall back to the moment the task reads them.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import importlib.util
import socket
import sys
import time
from collections import deque

import httpcore
import httpx

from harness.measure.arrival_stamps import ReaderThread, enable_kernel_stamps, reading_loop
from harness.tls import shared_ssl_context

# httpcore imports sniffio afresh for every lock it sets up (several per request); when
# sniffio is not installed each attempt scans sys.path on disk, inside the event loop.
# Cache the miss once, so the import fails at once and httpcore assumes asyncio.
if importlib.util.find_spec("sniffio") is None:
    # None there is the import system's cached miss; typeshed allows modules only.
    sys.modules.setdefault("sniffio", None)  # type: ignore[arg-type]


def _uncontended_locks_do_not_yield() -> None:
    """httpcore guards each connection with anyio locks that yield to the event loop on
    every acquire, contended or not: several loop turns per request, each running
    whatever else is ready, before the request's bytes leave (measured: 3.3 ms from
    call to write at one stream, 1.6 ms without). Each slot here carries one request at
    a time, so its locks are never contended; anyio's fast_acquire (4.5+) takes a free
    lock at once and still queues fairly when it is held."""
    try:
        import anyio
        from httpcore import _synchronization as sync

        anyio.Lock(fast_acquire=True)
    except (ImportError, TypeError, AttributeError):
        return
    original = sync.AsyncLock.setup

    def setup(self) -> None:
        original(self)
        if self._backend == "asyncio":
            self._anyio_lock = anyio.Lock(fast_acquire=True)

    sync.AsyncLock.setup = setup  # type: ignore[method-assign]  # the patch is the point


_uncontended_locks_do_not_yield()

# When a request's first bytes may leave (monotonic s). An open loop readies each request
# ahead of its scheduled instant (body, slot, connection, httpx's own work) and the timed
# stream holds the first write until then: on this VM the code that builds a request,
# run after an idle gap, took 2-5 ms, and a sleep woke 1-5 ms late (benchmarks/README.md).
SEND_NOT_BEFORE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "specbench_send_not_before", default=None
)
SPIN_S = 0.005  # the last stretch of a wait is polled, not slept


async def wait_until(t: float, spin_s: float = SPIN_S) -> None:
    """Return at monotonic time `t`: sleep, then poll the event loop for the last spin_s
    (other tasks still run: each poll is a turn of the loop)."""
    remaining = t - time.monotonic()
    if remaining > spin_s:
        await asyncio.sleep(remaining - spin_s)
    while time.monotonic() < t:
        await asyncio.sleep(0)


def holds_first_write(base_url: str) -> bool:
    """Whether make_client's connections honour SEND_NOT_BEFORE (the timed backend)."""
    return base_url.startswith("http://")


class TimedStream(httpcore.AsyncNetworkStream):
    """A TCP stream whose bytes carry the time they reached this process."""

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        self.sock, self.loop, self.fd = sock, loop, sock.fileno()
        self.segments: deque[tuple[float, bytes]] = deque()
        self.closed = False
        self.error: str | None = None
        self.waiter: asyncio.Future | None = None
        self.last_arrival_t: float | None = None
        self.last_write_t: float | None = None  # when the last write began
        self.kernel_stamps_on = enable_kernel_stamps(sock)
        self.reader = ReaderThread.get()
        self.in_loop = reading_loop(self.kernel_stamps_on) is loop
        if self.in_loop:
            loop.add_reader(self.fd, self._readable)
        else:
            self.reader.register(self)

    def _detach(self) -> None:
        if self.in_loop:
            self.in_loop = False
            with contextlib.suppress(RuntimeError):  # the loop is closed already
                self.loop.remove_reader(self.fd)
        else:
            self.reader.unregister(self)

    # -- the loop reads (kernel stamps) ----------------------------------------------
    def _readable(self) -> None:
        if self.take(time.monotonic()):
            self.wake()

    # -- reader thread side (or the loop's _readable) ----------------------------------
    def take(self, t: float) -> bool:
        """Drain the socket, stamping what it reads; True if there is news."""
        news = False
        while True:
            try:
                data, stamp, _ = self.reader.recv(self.sock, self.kernel_stamps_on, 262144, t)
            except (BlockingIOError, InterruptedError):
                return news
            except OSError as err:
                self.error, self.closed = str(err), True
                self._detach()
                return True
            if not data:
                self.closed = True
                self._detach()
                return True
            self.segments.append((stamp, data))
            news = True

    # -- event loop side -----------------------------------------------------------
    def wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        # No per-read timer (one per chunk adds up): the driver bounds each whole
        # request with one asyncio.timeout.
        while not self.segments and not self.closed:
            self.waiter = self.loop.create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None
        if self.segments:
            t, data = self.segments.popleft()
            if len(data) > max_bytes:
                self.segments.appendleft((t, data[max_bytes:]))
                data = data[:max_bytes]
            self.last_arrival_t = t
            return data
        if self.error is not None:
            raise httpcore.ReadError(self.error)
        return b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if self.closed:
            raise httpcore.WriteError("connection closed")
        if not buffer:  # h11's end-of-message for a sized body: nothing leaves
            return
        not_before = SEND_NOT_BEFORE.get()
        if not_before is not None:  # only a request's first write waits
            SEND_NOT_BEFORE.set(None)
            await wait_until(not_before)
        began = time.monotonic()  # taken before the send, so never after a reply's stamp
        try:
            await self.loop.sock_sendall(self.sock, buffer)
        except OSError as err:
            raise httpcore.WriteError(str(err)) from err
        self.last_write_t = began

    async def aclose(self) -> None:
        self._detach()
        self.closed = True
        self.sock.close()

    async def start_tls(self, ssl_context, server_hostname=None, timeout=None):
        raise httpcore.ConnectError("the timed backend serves plain http only")

    def get_extra_info(self, info: str):
        if info == "is_readable":  # httpcore asks this of idle connections: closed by peer?
            return self.closed or bool(self.segments)
        if info == "socket":
            return self.sock
        if info in ("client_addr", "server_addr"):
            return self.sock.getsockname() if info == "client_addr" else self.sock.getpeername()
        return None


class TimedBackend(httpcore.AsyncNetworkBackend):
    async def connect_tcp(
        self, host, port, timeout=None, local_address=None, socket_options=None
    ) -> TimedStream:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            family, _, proto, _, address = infos[0]
            sock = socket.socket(family, socket.SOCK_STREAM, proto)
        except OSError as err:
            raise httpcore.ConnectError(str(err)) from err
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if local_address:
                sock.bind((local_address, 0))
            await asyncio.wait_for(loop.sock_connect(sock, address), timeout)
        except TimeoutError as err:
            sock.close()
            raise httpcore.ConnectTimeout(f"connect to {host}:{port} timed out") from err
        except OSError as err:
            sock.close()
            raise httpcore.ConnectError(str(err)) from err
        return TimedStream(sock, loop)

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
    limits = httpx.Limits(
        max_connections=connections, max_keepalive_connections=connections, keepalive_expiry=60.0
    )
    timeout = httpx.Timeout(timeout_s)
    if base_url.startswith("http://"):
        return httpx.AsyncClient(
            transport=_TimedTransport(limits), timeout=timeout, trust_env=False
        )
    return httpx.AsyncClient(
        limits=limits, timeout=timeout, trust_env=False, verify=shared_ssl_context()
    )


def request_left_time(response: httpx.Response) -> float | None:
    """When the request's last bytes were handed to the kernel (timed backend only)."""
    stream = response.extensions.get("network_stream")
    return getattr(stream, "last_write_t", None)


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
        self._base_url = base_url.rstrip("/")
        self._clients = [make_client(base_url, 1, timeout_s) for _ in range(n)]
        # Last in, first out: the slot released last is lent next, so a slow open loop
        # keeps sending on a few warm connections. First in, first out walked all n, each
        # idle longer than the server's keep-alive (uvicorn: 5 s), and nearly every send
        # first paid for a reconnect (measured: send lag p50 4.5 ms, p99 18 ms at 5/s).
        self._free: asyncio.LifoQueue[httpx.AsyncClient] = asyncio.LifoQueue()
        for client in self._clients:
            self._free.put_nowait(client)

    async def connect(self, timeout_s: float = 10.0) -> None:
        """Open every slot's connection before the cell (a GET /v1/models each), so no
        request in it pays for a TCP connect. A slot that cannot connect now is left to
        connect on first use, where a failure is that request's recorded error."""

        async def one(client: httpx.AsyncClient) -> None:
            try:
                await client.get(self._base_url + "/v1/models", timeout=timeout_s)
            except httpx.HTTPError:
                pass

        await asyncio.gather(*(one(c) for c in self._clients))

    async def acquire(self) -> httpx.AsyncClient:
        return await self._free.get()

    def release(self, client: httpx.AsyncClient) -> None:
        self._free.put_nowait(client)

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()


__all__ = [
    "SEND_NOT_BEFORE",
    "ConnectionSlots",
    "TimedBackend",
    "TimedStream",
    "arrival_time",
    "holds_first_write",
    "make_client",
    "shared_ssl_context",
    "wait_until",
]
