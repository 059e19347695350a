"""Datagrams from jobs back to the benchmark: "done" counts and start stamps.

Every system's no-op job here ends by sending one empty datagram to the
benchmark's :class:`DoneCounter`, so "all N ran" is seen the same way for
ours, Huey, Celery and Dramatiq (RabbitMQ tells a client how many messages
are ready, not how many are still unacknowledged). A latency job sends its
sequence number and ``time.monotonic_ns()`` as it starts to a :class:`Probe`
(CLOCK_MONOTONIC is one clock for every process on Linux), so the start time
never rides on a system's result path. A datagram costs a job a few
microseconds, the same for every system.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

#: The receive buffer asked for (Linux caps it at net.core.rmem_max; 4 MiB
#: holds thousands of these datagrams while the reader waits for the GIL).
RCVBUF = 4 * 1024 * 1024
_STAMP = struct.Struct("<qq")
_out: socket.socket | None = None


def _socket() -> socket.socket:
    global _out
    if _out is None:
        _out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    return _out


def send_done(port: int) -> None:
    """Called by a job as it ends: one empty datagram to 127.0.0.1:``port``."""
    _socket().sendto(b"", ("127.0.0.1", port))


def send_stamp(port: int, seq: int) -> None:
    """Called by a job as it starts: ``seq`` and the monotonic clock (ns)."""
    _socket().sendto(_STAMP.pack(seq, time.monotonic_ns()), ("127.0.0.1", port))


def _bound() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
    sock.bind(("127.0.0.1", 0))
    return sock


class DoneCounter:
    """Counts "done" datagrams in a thread; :meth:`wait` returns the moment
    (``time.perf_counter()``) the count reached the target :meth:`expect` set."""

    def __init__(self) -> None:
        self.sock = _bound()
        self.port: int = self.sock.getsockname()[1]
        self.count = 0
        self._target = 0
        self._reached = 0.0
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, name="done-counter", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while True:
            try:
                self.sock.recv(64)
            except OSError:
                return  # closed
            now = time.perf_counter()
            with self._cond:
                self.count += 1
                if self.count == self._target:
                    self._reached = now
                    self._cond.notify_all()

    def expect(self, target: int) -> None:
        """Note the moment the count reaches ``target`` (call before sending)."""
        with self._cond:
            self._target, self._reached = target, 0.0

    def wait(self, timeout: float) -> tuple[float, int]:
        """Block until the count reached :meth:`expect`'s target or ``timeout``
        seconds passed: (perf_counter when it did, or now; the count)."""
        with self._cond:
            self._cond.wait_for(lambda: self.count >= self._target, timeout)
            if self.count >= self._target and self._reached:
                return self._reached, self.count
            return time.perf_counter(), self.count

    def close(self) -> None:
        self.sock.close()


class Probe:
    """Start stamps by sequence number: :meth:`wait` is ``latency.py``'s wait
    (handle, timeout) -> the job's start time in ns, or None."""

    def __init__(self) -> None:
        self.sock = _bound()
        self.port: int = self.sock.getsockname()[1]
        self.seq = 0
        self._early: dict[int, int] = {}

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def wait(self, seq: int, timeout: float) -> int | None:
        if seq in self._early:
            return self._early.pop(seq)
        deadline = time.monotonic() + timeout
        while True:
            self.sock.settimeout(max(0.0, deadline - time.monotonic()) or 0.000001)
            try:
                data = self.sock.recv(64)
            except (TimeoutError, BlockingIOError):
                return None
            got, stamp = _STAMP.unpack(data)
            if got == seq:
                return int(stamp)
            self._early[got] = stamp

    def close(self) -> None:
        self.sock.close()
