"""An httpx client whose connections stamp every received segment with its arrival time.

With plain httpx a chunk's time is taken when the reading task next runs. At 64 streams
an engine step sends 64 chunks at once, and the event loop only looks for new bytes
between rounds of work, so a chunk would be stamped after the parsing of the chunks
before it: milliseconds late. Here the kernel stamps each segment as it arrives
(SO_TIMESTAMPNS: on loopback, inside the engine's own send call), and the event loop
reads each connection's bytes with their kernel stamp as soon as it is readable (one
readiness callback per connection, every ready one read before any is parsed); httpx
parses them whenever the loop gets to it, and the stamp stays right however late the
read. A read that finds several segments waiting carries the last one's stamp: the
stamp bounds (stamp_bounds.py) measure that. Where the kernel gives no stamp, one
reader thread waits on those connections (epoll) and its wake-up time is the stamp
(then the stamp waits for a CPU and the GIL; the process asks for a short GIL switch
interval, 0.5 ms, to keep that small).

httpx stays the one HTTP client; only its network backend (the documented httpcore
extension point) is ours. Plain http only: an https URL gets the stock backend, and
chunk times fall back to the moment the task reads them.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import importlib.util
import select
import socket
import struct
import sys
import threading
import time
from collections import deque

import httpcore
import httpx

from harness.tls import shared_ssl_context

# httpcore imports sniffio afresh for every lock it sets up (several per request); when
# sniffio is not installed each attempt scans sys.path on disk, inside the event loop.
# Cache the miss once, so the import fails at once and httpcore assumes asyncio.
if importlib.util.find_spec("sniffio") is None:
    sys.modules.setdefault("sniffio", None)

GIL_SWITCH_INTERVAL_S = 0.0005


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

    sync.AsyncLock.setup = setup


_uncontended_locks_do_not_yield()

# Kernel receive timestamps (Linux: SO_TIMESTAMPNS = 35, a struct timespec on the
# realtime clock per recvmsg, the arrival of the last segment it returned).
SO_TIMESTAMPNS: int | None = getattr(socket, "SO_TIMESTAMPNS",
                                     35 if sys.platform.startswith("linux") else None)
_TIMESPEC = struct.Struct("qq")
_ANCILLARY_SIZE = socket.CMSG_SPACE(_TIMESPEC.size)
KERNEL_STAMPS = True  # False: stamp with the reader thread's clock (tests of that path)
# Where a kernel-stamped connection is read: in the event loop (True) or by the reader
# thread. A kernel stamp is the segment's arrival whoever reads it, so the loop reads
# them itself: on a host that starves the client, each hand-over between two threads
# (the reader wakes, takes the GIL, wakes the loop through its self-pipe) waits for the
# scheduler once more, and the process fell seconds behind (issue 34). The reader thread
# stamps only where the kernel gives no stamp: then the time of the read is the stamp.
READ_IN_LOOP = True
_OFFSET_REFRESH_S = 0.5  # re-read realtime - monotonic this often (a stepped wall clock)


def _realtime_minus_monotonic_ns() -> int:
    """The realtime clock's offset from the monotonic one, from the tightest of three
    bracketed readings (tens of ns)."""
    best: tuple[int, int] | None = None
    for _ in range(3):
        a = time.monotonic_ns()
        r = time.time_ns()
        b = time.monotonic_ns()
        if best is None or b - a < best[0]:
            best = (b - a, r - (a + b) // 2)
    return best[1]


def enable_kernel_stamps(sock: socket.socket) -> bool:
    if not KERNEL_STAMPS or SO_TIMESTAMPNS is None:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


class _ReaderThread:
    """Waits on every timed connection; stamps, reads and queues what arrives."""

    _instance: _ReaderThread | None = None
    _lock = threading.Lock()

    @classmethod
    def get(cls) -> _ReaderThread:
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def __init__(self) -> None:
        self.epoll = select.epoll()
        self.streams: dict[int, TimedStream | StampPathProbe] = {}
        self.offset_ns = _realtime_minus_monotonic_ns()
        self._offset_t = time.monotonic()
        # Segments stamped by the kernel / by this thread's clock (read by client health).
        self.kernel_stamped = self.thread_stamped = 0
        self._started = False

    def register(self, stream: TimedStream | StampPathProbe) -> None:
        """Read `stream` on this thread (a connection the kernel does not stamp)."""
        with self._lock:
            if not self._started:  # started by the first connection it reads
                self._started = True
                sys.setswitchinterval(min(sys.getswitchinterval(), GIL_SWITCH_INTERVAL_S))
                threading.Thread(target=self._run, name="specbench-stream-reader",
                                 daemon=True).start()
        self.streams[stream.fd] = stream
        self.epoll.register(stream.fd, select.EPOLLIN | select.EPOLLRDHUP)

    def unregister(self, stream: TimedStream | StampPathProbe) -> None:
        if self.streams.pop(stream.fd, None) is not None:
            try:
                self.epoll.unregister(stream.fd)
            except (OSError, ValueError):
                pass

    def _run(self) -> None:
        while True:
            events = self.epoll.poll(1.0)
            t = time.monotonic()
            woken: dict[asyncio.AbstractEventLoop, list[TimedStream]] = {}
            for fd, _ in events:
                stream = self.streams.get(fd)
                if stream is not None and stream.take(t):
                    woken.setdefault(stream.loop, []).append(stream)
            for loop, streams in woken.items():
                try:
                    loop.call_soon_threadsafe(_wake_all, streams)
                except RuntimeError:  # that loop is closed; its streams are finished
                    for stream in streams:
                        self.unregister(stream)

    def kernel_arrival(self, ancdata: list, woke_t: float) -> float | None:
        """The kernel's stamp of a read, on the monotonic clock."""
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(payload) >= 16:
                if woke_t - self._offset_t > _OFFSET_REFRESH_S:
                    self.offset_ns, self._offset_t = _realtime_minus_monotonic_ns(), woke_t
                sec, nsec = _TIMESPEC.unpack_from(payload)
                t = (sec * 1_000_000_000 + nsec - self.offset_ns) / 1e9
                # Bytes may land between the wake-up and the read; a stamp after the
                # read itself means the wall clock stepped: not a stamp to trust.
                if t <= woke_t or t <= time.monotonic():
                    return t
                return None
        return None

    def recv(self, sock: socket.socket, stamped: bool, size: int,
             woke_t: float) -> tuple[bytes, float, bool]:
        """Read what is there: (bytes, arrival time, whether the kernel stamped it)."""
        if stamped:
            data, ancdata, _, _ = sock.recvmsg(size, _ANCILLARY_SIZE)
            t = self.kernel_arrival(ancdata, woke_t) if data else None
        else:
            data, t = sock.recv(size), None
        if data:
            if t is not None:
                self.kernel_stamped += 1
                return data, t, True
            self.thread_stamped += 1
        return data, woke_t, False


class StampPathProbe:
    """Measures how late an arrival is stamped: at each due time the probe writes into a
    loopback TCP connection the reader waits on like any stream, stamped the same way,
    and the stamp's delay is the delay every chunk stamp could carry. A kernel stamp is
    taken inside the write, so its delay is from the write; a thread stamp's is from the
    due time, because the probe thread itself waits for the GIL to write, exactly as the
    stamping thread does when chunks arrive from another process."""

    _FORMAT = struct.Struct("dd")  # (due, written)

    def __init__(self) -> None:
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            self._send = socket.create_connection(listener.getsockname())
            self._recv, _ = listener.accept()
        self._send.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._recv.setblocking(False)
        self.kernel_stamps_on = enable_kernel_stamps(self._recv)
        self.fd = self._recv.fileno()
        self.lags_ms: list[float] = []
        self._pending = b""
        self.reader = _ReaderThread.get()
        # Read where a chunk would be read: in the running loop when the kernel stamps.
        self._loop = _reading_loop(self.kernel_stamps_on)
        if self._loop is not None:
            self._loop.add_reader(self.fd, self.take, None)
        else:
            self.reader.register(self)

    @property
    def in_loop(self) -> bool:
        """Read by the running event loop (kernel stamps), not by the reader thread."""
        return self._loop is not None

    def tick(self, due: float) -> None:
        """Called at the due time: by the probe thread, or by the loop when it reads."""
        try:
            self._send.send(self._FORMAT.pack(due, time.monotonic()))
        except OSError:
            pass

    def take(self, t: float | None) -> bool:  # reader thread, or the loop (t None)
        t = time.monotonic() if t is None else t
        while True:
            try:
                data, stamp, by_kernel = self.reader.recv(
                    self._recv, self.kernel_stamps_on, 65536, t)
            except OSError:
                return False
            if not data:
                return False
            self._pending += data
            size = self._FORMAT.size
            ticks = []
            while len(self._pending) >= size:
                ticks.append(self._FORMAT.unpack(self._pending[:size]))
                self._pending = self._pending[size:]
            if by_kernel and ticks:
                # A kernel stamp is exact for the read's last write only; earlier ones
                # read with it are the reader falling behind, which the stamp bounds
                # of chunks measure (see stamp_bounds), not a delay of the stamp path.
                ticks = ticks[-1:]
            for due, written in ticks:
                self.lags_ms.append(max(0.0, (stamp - (written if by_kernel else due)) * 1e3))

    def close(self) -> None:
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed already
                self._loop.remove_reader(self.fd)
        else:
            self.reader.unregister(self)
        self._send.close()
        self._recv.close()


def _reading_loop(kernel_stamped: bool) -> asyncio.AbstractEventLoop | None:
    """The running event loop, when a connection stamped by the kernel is to be read
    there (READ_IN_LOOP); None: the reader thread reads it."""
    if not (kernel_stamped and READ_IN_LOOP):
        return None
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


# When a request's first bytes may leave (monotonic s). An open loop readies each request
# ahead of its scheduled instant (body, slot, connection, httpx's own work) and the timed
# stream holds the first write until then: on this VM the code that builds a request,
# run after an idle gap, took 2-5 ms, and a sleep woke 1-5 ms late (benchmarks/README.md).
SEND_NOT_BEFORE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "specbench_send_not_before", default=None)
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


def _wake_all(streams: list[TimedStream]) -> None:
    for stream in streams:
        stream.wake()


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
        self.reader = _ReaderThread.get()
        self.in_loop = _reading_loop(self.kernel_stamps_on) is loop
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
    async def connect_tcp(self, host, port, timeout=None, local_address=None,
                          socket_options=None) -> TimedStream:
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
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections,
                          keepalive_expiry=60.0)
    timeout = httpx.Timeout(timeout_s)
    if base_url.startswith("http://"):
        return httpx.AsyncClient(transport=_TimedTransport(limits), timeout=timeout,
                                 trust_env=False)
    return httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False,
                             verify=shared_ssl_context())


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


__all__ = ["SEND_NOT_BEFORE", "ConnectionSlots", "StampPathProbe", "TimedBackend", "TimedStream",
           "arrival_time", "holds_first_write", "make_client", "shared_ssl_context",
           "wait_until"]
