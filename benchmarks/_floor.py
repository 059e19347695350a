"""The floor: the latency of our path's hops and sync alone, with no logic at all.

A job of ours goes client -> router (stored: a journal commit, one fdatasync)
-> job manager -> worker child (a pipe), and its reply comes back the same way.
This module plays that path with processes that do nothing else, so
``latency.py`` can print, beside our figures, what this machine's wake-ups,
loopback TCP and disk flush cost on their own (the part no code of ours can
remove), and how much is ours on top.

Roles (each its own process; ``latency.py`` runs ``relay`` and ``manager``,
the manager runs ``child``):

* ``relay FRONTEND BACKEND SYNC_FILE``: a ROUTER for the client and one for
  the manager; each request is written to SYNC_FILE (one 4 KiB page, then
  ``fdatasync``, as a journal commit of one job; the requests already waiting
  share one, a group commit) before it goes on to the manager and its ACK to
  the client; replies go back to their client. An
  empty SYNC_FILE skips the write.
* ``manager BACKEND``: a DEALER that passes each job to its child over a pipe
  and the child's answer back as the reply.
* ``child``: reads jobs on stdin and answers each with the monotonic clock
  (ns) read as it arrived: the "job started" stamp.

:class:`Floor` starts the relay and the manager; :meth:`Floor.one` sends one
job and returns its start stamp and the moment its reply arrived.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

import zmq

from benchmarks._peers import Proc, tcp_addr

#: Roughly an eMQP REQUEST's size, so the copies are alike.
PAYLOAD = b'["run", {"path": "benchmarks.noop_jobs", "callable": "stamp"}]' + b" " * 120
#: The sync file's size: pages are written in turn, overwriting (as a reused WAL).
SYNC_PAGES = 256
PAGE = 4096
#: At most this many requests stored by one sync.
GROUP = 256
_LENGTH = struct.Struct("<I")
_STAMP = struct.Struct("<q")


def _read_exactly(fd: int, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def child() -> None:
    fd_in, fd_out = sys.stdin.fileno(), sys.stdout.fileno()
    while True:
        try:
            (size,) = _LENGTH.unpack(_read_exactly(fd_in, _LENGTH.size))
            _read_exactly(fd_in, size)
        except EOFError:
            return
        os.write(fd_out, _STAMP.pack(time.monotonic_ns()))


def manager(backend_addr: str) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(backend_addr)
    kid = subprocess.Popen(
        [sys.executable, "-m", "benchmarks._floor", "child"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert kid.stdin is not None and kid.stdout is not None
    to_kid, from_kid = kid.stdin.fileno(), kid.stdout.fileno()
    sock.send(b"hello")
    clients: deque[bytes] = deque()  # whose job the child runs, in order
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    poller.register(from_kid, zmq.POLLIN)
    try:
        while True:
            for item, _ in poller.poll():
                if item is sock:
                    client, payload = sock.recv_multipart()
                    clients.append(client)
                    os.write(to_kid, _LENGTH.pack(len(payload)) + payload)
                else:
                    stamp = _read_exactly(from_kid, _STAMP.size)
                    sock.send_multipart([clients.popleft(), stamp])
    finally:
        kid.kill()


def relay(frontend_addr: str, backend_addr: str, sync_file: str) -> None:
    ctx = zmq.Context()
    frontend, backend = ctx.socket(zmq.ROUTER), ctx.socket(zmq.ROUTER)
    for sock in (frontend, backend):
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 0)  # a ROUTER drops at its HWM: pipelined clients lose none
    frontend.bind(frontend_addr)
    backend.bind(backend_addr)
    fd = -1
    if sync_file:
        fd = os.open(sync_file, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, b"\0" * (PAGE * SYNC_PAGES))  # written once: later writes overwrite
        os.fsync(fd)
    print("relay ready", flush=True)
    manager_id, _hello = backend.recv_multipart()
    page = b"j" * PAGE
    written = 0
    poller = zmq.Poller()
    poller.register(frontend, zmq.POLLIN)
    poller.register(backend, zmq.POLLIN)
    while True:
        for sock, _ in poller.poll():
            if sock is frontend:
                # Every request waiting is stored by one sync (group commit); one
                # sender one at a time gets one sync per job, as before.
                batch = [frontend.recv_multipart()]
                while len(batch) < GROUP and frontend.poll(0):
                    batch.append(frontend.recv_multipart())
                if fd >= 0:
                    os.pwrite(fd, page, (written % SYNC_PAGES) * PAGE)
                    os.fdatasync(fd)
                    written += 1
                for client, payload in batch:
                    backend.send_multipart([manager_id, client, payload])
                    frontend.send_multipart([client, b"ACK"])
            else:
                _manager, client, stamp = backend.recv_multipart()
                frontend.send_multipart([client, stamp])


class Floor:
    """The relay and the manager (with its child) running; one client socket."""

    def __init__(self, *, sync: bool = True) -> None:
        frontend, backend = tcp_addr(), tcp_addr()
        self.frontend = frontend
        role = [sys.executable, "-m", "benchmarks._floor"]
        # In the temporary directory, where the benchmarks' router keeps its journal.
        handle, self._sync_file = tempfile.mkstemp(prefix="emq-floor-", suffix=".sync")
        os.close(handle)
        self.relay = Proc([*role, "relay", frontend, backend, self._sync_file if sync else ""])
        self.manager: Proc | None = None
        self.sock: zmq.Socket[bytes] | None = None
        try:
            self.relay.wait_output("relay ready", 30)  # fails at once if the relay exits
            self.manager = Proc([*role, "manager", backend])
            self.sock = zmq.Context.instance().socket(zmq.DEALER)
            self.sock.setsockopt(zmq.LINGER, 0)
            self.sock.connect(frontend)
        except BaseException:
            self.stop()
            raise

    def one(self, timeout: float = 60.0) -> tuple[int, int, int]:
        """Send one job; ``(sent, started, replied)`` in monotonic ns."""
        assert self.sock is not None
        sent = time.monotonic_ns()
        self.sock.send(PAYLOAD)
        deadline = time.monotonic() + timeout
        while True:
            if not self.sock.poll(max(1, int((deadline - time.monotonic()) * 1000))):
                raise TimeoutError(f"no answer from the floor's path within {timeout} s")
            frame = self.sock.recv()
            if frame != b"ACK":
                (started,) = _STAMP.unpack(frame)
                return sent, started, time.monotonic_ns()

    def stop(self) -> None:
        if self.sock is not None:
            self.sock.close(linger=0)
            self.sock = None
        for proc in (self.manager, self.relay):
            if proc is not None:
                proc.stop()
        Path(self._sync_file).unlink(missing_ok=True)


def main(argv: list[str]) -> int:
    role, args = argv[0], argv[1:]
    if role == "child":
        child()
    elif role == "manager":
        manager(*args)
    elif role == "relay":
        relay(*args)
    else:
        print(f"unknown role {role!r}: child, manager or relay", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
