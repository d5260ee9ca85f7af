"""Each received segment stamped with the time it reached this process.

The kernel stamps each segment as it arrives (SO_TIMESTAMPNS: on loopback, inside the
engine's own send call), and the event loop reads each connection's bytes with their
kernel stamp as soon as it is readable (one readiness callback per connection, every
ready one read before any is parsed), so the stamp stays right however late httpx parses
them. A read that finds several segments waiting carries the last one's stamp: the
stamp bounds (stamp_bounds.py) measure that. Where the kernel gives no stamp, one
reader thread waits on those connections (epoll) and its wake-up time is the stamp
(then the stamp waits for a CPU and the GIL; the process asks for a short GIL switch
interval, 0.5 ms, to keep that small). StampPathProbe measures how late a stamp is.
The connections themselves are the timed transport's (transport.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import struct
import sys
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.measure.transport import TimedStream

GIL_SWITCH_INTERVAL_S = 0.0005

# Kernel receive timestamps (Linux: SO_TIMESTAMPNS = 35, a struct timespec on the
# realtime clock per recvmsg, the arrival of the last segment it returned).
SO_TIMESTAMPNS: int | None = getattr(
    socket, "SO_TIMESTAMPNS", 35 if sys.platform.startswith("linux") else None
)
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
    readings = []  # (width, offset)
    for _ in range(3):
        a = time.monotonic_ns()
        r = time.time_ns()
        b = time.monotonic_ns()
        readings.append((b - a, r - (a + b) // 2))
    return min(readings, key=lambda w_o: w_o[0])[1]


def enable_kernel_stamps(sock: socket.socket) -> bool:
    if not KERNEL_STAMPS or SO_TIMESTAMPNS is None:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


class ReaderThread:
    """Waits on every timed connection; stamps, reads and queues what arrives."""

    _instance: ReaderThread | None = None
    _lock = threading.Lock()

    @classmethod
    def get(cls) -> ReaderThread:
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
                threading.Thread(
                    target=self._run, name="specbench-stream-reader", daemon=True
                ).start()
        self.streams[stream.fd] = stream
        self.epoll.register(stream.fd, select.EPOLLIN | select.EPOLLRDHUP)

    def unregister(self, stream: TimedStream | StampPathProbe) -> None:
        if self.streams.pop(stream.fd, None) is not None:
            try:
                self.epoll.unregister(stream.fd)
            except (OSError, ValueError):
                pass

    def _run(self) -> None:
        try:
            self._stamp_forever()
        except BaseException as err:  # no stream may wait forever on a dead reader
            self._fail_all(f"the stream-reading thread failed: {err!r}")

    def _fail_all(self, error: str) -> None:
        with self._lock:
            self._started = False  # the next connection starts a fresh thread
        for stream in list(self.streams.values()):
            self.unregister(stream)
            if isinstance(stream, StampPathProbe):
                continue
            stream.error, stream.closed = error, True
            with contextlib.suppress(RuntimeError):  # that loop is closed already
                stream.loop.call_soon_threadsafe(stream.wake)

    def _stamp_forever(self) -> None:
        while True:
            events = self.epoll.poll(1.0)
            t = time.monotonic()
            woken: dict[asyncio.AbstractEventLoop, list[TimedStream]] = {}
            for fd, _ in events:
                stream = self.streams.get(fd)
                # A probe's take records its lags and wakes no one (it returns False).
                if stream is not None and stream.take(t) and not isinstance(stream, StampPathProbe):
                    woken.setdefault(stream.loop, []).append(stream)
            for loop, streams in woken.items():
                try:
                    loop.call_soon_threadsafe(wake_all, streams)
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

    def recv(
        self, sock: socket.socket, stamped: bool, size: int, woke_t: float
    ) -> tuple[bytes, float, bool]:
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
        self.reader = ReaderThread.get()
        # Read where a chunk would be read: in the running loop when the kernel stamps.
        self._loop = reading_loop(self.kernel_stamps_on)
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
                    self._recv, self.kernel_stamps_on, 65536, t
                )
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


def reading_loop(kernel_stamped: bool) -> asyncio.AbstractEventLoop | None:
    """The running event loop, when a connection stamped by the kernel is to be read
    there (READ_IN_LOOP); None: the reader thread reads it."""
    if not (kernel_stamped and READ_IN_LOOP):
        return None
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def wake_all(streams: list[TimedStream]) -> None:
    for stream in streams:
        stream.wake()
