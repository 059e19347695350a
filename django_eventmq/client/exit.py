"""The clients' own ZeroMQ context in a process, flushed at exit.

Not the process-wide context of :mod:`.transport`: terminating a context is
the only way to wait until queued messages are written out, and that one
also holds sockets (a router, a job manager in tests) that stay open. Every
:class:`~.connection.Client` is made in :func:`context` and recorded with
:func:`opened`; :func:`flush_at_exit` runs at interpreter exit.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

from django_eventmq.runtime import transport

if TYPE_CHECKING:
    from django_eventmq.client.connection import Client

# The client's logger: what the exit says is about the client's jobs.
logger = logging.getLogger("django_eventmq.client")

_context_lock = threading.Lock()
_context_pid = 0
_context_made: Any = None
#: Clients made in this process (what the exit flush closes).
_clients: weakref.WeakSet[Client] = weakref.WeakSet()
#: The longest linger (SEND_TIMEOUT) of those: how long the exit flush may wait.
_flush_ms = 0
#: A flush this close to the linger is taken to have run out of it.
_FLUSH_SLACK_MS = 50


def context() -> Any:
    """The clients' ZeroMQ context in this process (a new one after fork)."""
    global _context_made, _context_pid, _clients, _flush_ms
    pid = os.getpid()
    with _context_lock:
        if _context_made is None or _context_pid != pid:
            # After fork the parent's context must not be touched: make our own.
            _context_made, _context_pid, _clients = transport.Context(), pid, weakref.WeakSet()
            _flush_ms = 0
        return _context_made


def opened(client: Client) -> None:
    """Record ``client`` (made in :func:`context`) for the exit flush."""
    global _flush_ms
    with _context_lock:
        _clients.add(client)
        _flush_ms = max(_flush_ms, client.linger_ms)


@atexit.register
def flush_at_exit() -> None:
    """Wait up to ``SEND_TIMEOUT`` until the router has read the jobs this
    process sent, and log once if it did not.

    A script's last ``.delay()`` returns as soon as its job is queued in the
    socket; without this the interpreter could exit before ZeroMQ's I/O
    thread wrote it, or before the router read it (closing the connection
    with our unread ACKs in it resets it, and the router's unread data goes).
    A router of ours confirms (:meth:`.Client.confirm_read`); for another,
    waiting until ZeroMQ wrote everything is the best there is. Sockets of
    threads still running (daemon threads) are not ours to close: they are
    named in a log line instead.
    """
    ctx = _context_made
    if ctx is None or _context_pid != os.getpid():
        return
    current = threading.current_thread()
    busy: set[str] = set()
    flushed: set[str] = set()
    lost: set[str] = set()
    # One SEND_TIMEOUT for all the clients, not one each.
    deadline = time.monotonic() + _flush_ms / 1000
    for client in list(_clients):
        if client.channel.socket.closed:
            continue
        if client.thread is not current and client.thread.is_alive():
            busy.add(client.addr)
            continue
        flushed.add(client.addr)
        logger.debug(
            "at exit: waiting up to %gs for the router at %s to read what this process sent",
            max(0.0, deadline - time.monotonic()),
            client.addr,
        )
        # Closing right after the last write is not enough: the router must have
        # read it, or the reset of our closing connection discards it.
        if client.confirm_read(deadline) is False:
            lost.add(client.addr)
            client.channel.close()  # it was given SEND_TIMEOUT already
        else:
            client.close()
    if busy:
        # term() would wait for their sockets for ever.
        logger.warning(
            "at exit, client sockets of threads still running were not flushed: jobs they "
            "queued may not have reached the router at %s",
            ", ".join(sorted(busy)),
        )
    else:
        # term() returns once every socket's queued messages are written, or its
        # linger (SEND_TIMEOUT) ran out: only then does it take that long.
        started = time.monotonic()
        ctx.term()
        if (time.monotonic() - started) * 1000 >= _flush_ms - _FLUSH_SLACK_MS:
            lost |= flushed or {"(sockets closed earlier)"}
    if lost:
        logger.warning(
            "at exit, jobs this process sent to the router at %s may be lost: it did not "
            "take them within SEND_TIMEOUT=%gs (is it running and reading?)",
            ", ".join(sorted(lost)),
            _flush_ms / 1000,
        )
