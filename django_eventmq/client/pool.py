"""The clients of a process: one per thread and address, kept open when a thread ends.

:func:`get_client` gives the calling thread its client for an address,
made on first use and made again after a fork (pre-fork web servers import
the app, then fork workers): a :class:`~.connection.Client`, or a
:class:`~.shards.ShardedClient` when the address names several router
groups (:func:`connect`). When a thread ends, its clients are not closed but
kept open, idle, for the next thread that needs one: closing them would lose
jobs the router has not read yet (see :class:`_ThreadClients`).

:func:`remember_sender` and :func:`sender_of`: which client sent a job whose
outcome may be waited for (the router answers the socket that sent it, and
``.wait()`` may come from any thread).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Mapping
from typing import Any

from django_eventmq.client.connection import Client, client_options
from django_eventmq.client.shards import ShardedClient
from django_eventmq.runtime import config
from django_eventmq.runtime.addresses import SHARD_BY_QUEUE, check_shard_by, parse_groups

_local = threading.local()
#: This process's pid (``os.getpid()`` is a system call; every ``.delay()`` and
#: ``.wait()`` looks), made again in a forked child, as the msgid prefix is.
_pid = os.getpid()
#: Clients of threads that ended, still open, by address: the next thread that
#: needs a client for that address takes one (at most as many as threads ran
#: at once). Guarded by ``_idle_lock``, which is also the memory barrier ZeroMQ
#: asks for when a socket moves to another thread.
_idle: dict[str, list[Client | ShardedClient]] = {}
_idle_lock = threading.Lock()


#: Most senders remembered (:func:`remember_sender`), the oldest forgotten first.
MAX_SENDERS = 100_000
#: The client that sent each job whose outcome may be waited for, by msgid: the
#: router answers the socket that sent it, and ``.wait()`` may come from any thread.
_senders: dict[str, Client | ShardedClient] = {}


def remember_sender(msgid: str, client: Client | ShardedClient) -> None:
    """``client`` sent job ``msgid``, whose outcome will come to its socket."""
    senders = _senders
    senders[msgid] = client
    if len(senders) > MAX_SENDERS:
        with contextlib.suppress(StopIteration, KeyError, RuntimeError):  # another thread's
            del senders[next(iter(senders))]


def sender_of(msgid: str) -> Client | ShardedClient | None:
    """The open client of this process that sent job ``msgid``, if it is remembered."""
    client = _senders.get(msgid)
    return None if client is None or client.closed else client


def _forked() -> None:
    global _pid, _idle, _idle_lock
    _pid = os.getpid()
    _senders.clear()  # the parent's sockets
    # The parent's sockets: never used here, only forgotten (pyzmq closes
    # nothing it made in another process). The lock may have been held by
    # another of the parent's threads, which the child does not have.
    _idle, _idle_lock = {}, threading.Lock()


os.register_at_fork(after_in_child=_forked)


class _ThreadClients(dict[str, "Client | ShardedClient"]):
    """One thread's clients by address, held by its thread-local.

    When the thread ends, the thread-local goes and so does this: its clients
    go to :data:`_idle`, open. Closing them instead lost jobs: a socket closed
    with ZeroMQ's linger writes its queue out to the kernel, but the router
    is still reading its backlog and ACKing it, the ACKs meet a closed socket,
    the kernel answers with a reset, and the reset throws away every job still
    in the router's receive buffer (4 threads sending 2,500 each and ending:
    over half lost, nothing logged). Kept open, the connection carries every
    job to the router while the process lives; at exit the flush
    (:mod:`.exit`) waits until the router has read them.
    """

    __slots__ = ("pid",)

    def __init__(self, pid: int) -> None:
        super().__init__()
        self.pid = pid

    def __del__(self) -> None:
        # Runs in the ending thread. Not in a forked child (the parent's sockets).
        if self.pid != _pid or not self:
            return
        with _idle_lock:
            for addr, client in self.items():
                _idle.setdefault(addr, []).append(client)


def _idle_client(addr: str) -> Client | ShardedClient | None:
    """An open client for ``addr`` left by a thread that ended, now this thread's."""
    with _idle_lock:
        idle = _idle.get(addr)
        while idle:
            client = idle.pop()
            if not client.closed:
                client.take_over()
                return client
    return None


def get_client(addr: str, *, send_timeout: float = 5.0) -> Client | ShardedClient:
    """This thread's client for ``addr`` (a new one after fork).

    ``addr`` naming several router groups (``"a,b;c,d"``) gives a
    :class:`~.shards.ShardedClient`, one :class:`Client` per group. Its
    sockets speak CURVE as the current settings say (the router's frontend
    role), so every client of this process uses the same key pair.
    """
    clients: _ThreadClients | None = getattr(_local, "clients", None)
    pid = _pid
    if clients is None or clients.pid != pid:
        # After fork the inherited sockets belong to the parent: never use
        # or close them here, just forget them.
        clients = _local.clients = _ThreadClients(pid)
    client = clients.get(addr)
    if client is None:
        client = _idle_client(addr)
        if client is None:
            settings = config.get_settings()
            client = connect(
                addr,
                send_timeout=send_timeout,
                options=client_options(settings),
                shard_by=settings.shard_by,
            )
        clients[addr] = client
    return client


def connect(
    addr: str,
    *,
    send_timeout: float = 5.0,
    options: Mapping[int, Any] | None = None,
    shard_by: str = SHARD_BY_QUEUE,
) -> Client | ShardedClient:
    """A new client for ``addr``: a :class:`Client` for one router group, a
    :class:`~.shards.ShardedClient` (a Client per group, jobs spread as
    ``shard_by`` says) for several (``"a,b;c,d"``)."""
    groups = parse_groups(addr, "BROKER_ADDR")
    if len(groups) == 1:
        return Client(addr, send_timeout=send_timeout, options=options)
    members = [
        Client(",".join(group), send_timeout=send_timeout, options=options, watch_peer=True)
        for group in groups
    ]
    return ShardedClient(
        addr,
        members,
        send_timeout=send_timeout,
        shard_by=check_shard_by(shard_by),
    )


def existing_client(addr: str) -> Client | ShardedClient | None:
    """This thread's client for ``addr`` if it has one (none is made)."""
    clients: _ThreadClients | None = getattr(_local, "clients", None)
    if clients is None or clients.pid != _pid:
        return None
    return clients.get(addr)


def close_clients() -> None:
    """Close this thread's client sockets and those threads that ended left
    (tests, shutdown)."""
    clients: _ThreadClients | None = getattr(_local, "clients", None)
    _local.clients = _ThreadClients(_pid)
    closing: list[Client | ShardedClient] = []
    if clients is not None and clients.pid == _pid:
        closing.extend(clients.values())
        clients.clear()  # closed below: nothing to leave for another thread
    with _idle_lock:
        for idle in _idle.values():
            closing.extend(idle)
        _idle.clear()
    for client in closing:
        client.close()
