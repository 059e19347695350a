"""Sending jobs to a router: one DEALER socket per process and thread.

The socket is made on first use in the calling thread and remade after a
fork (pre-fork web servers import the app, then fork workers). Sending never
waits for the job to run; it waits at most ``SEND_TIMEOUT`` for the socket
to take the message.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from ..errors import BrokerUnavailable
from ..protocol import (
    EMPTY_HEADERS,
    Headers,
    Message,
    Request,
    Schedule,
    Unschedule,
    new_msgid,
)
from ..protocol.constants import PROTOCOL_VERSION_B, REQUEST
from . import transport

#: Messages a client may queue in its socket before ``.delay()`` blocks.
CLIENT_SNDHWM = 100_000
#: Sends between two reads of what the router sent us (ACKs we don't wait for).
DRAIN_EVERY = 256

_VERSION = PROTOCOL_VERSION_B
_REQUEST = REQUEST.encode()


class Client:
    """A connection to a router's frontend."""

    def __init__(self, addr: str, *, send_timeout: float = 5.0) -> None:
        self.addr = addr
        self.pid = os.getpid()
        self._sends = 0
        self.channel = transport.Channel(
            transport.DEALER,
            connect=addr,
            hwm=CLIENT_SNDHWM,
            options={transport.SNDTIMEO: int(send_timeout * 1000)},
        )

    def send(self, message: Message) -> str:
        """Send ``message``; returns its msgid."""
        try:
            self.channel.send(message)
        except transport.Again:
            raise BrokerUnavailable(
                f"the router at {self.addr} is not taking messages (is emq_router running?)"
            ) from None
        self.drain()
        return message.msgid

    def send_request_frames(self, msgid: bytes, queue: bytes, headers: bytes, body: bytes) -> None:
        """Send a REQUEST from already-encoded fields (the ``.delay()`` fast path)."""
        try:
            self.channel.send_frames([b"", _VERSION, _REQUEST, msgid, queue, headers, body])
        except transport.Again:
            raise BrokerUnavailable(
                f"the router at {self.addr} is not taking messages (is emq_router running?)"
            ) from None
        self._sends += 1
        if self._sends % DRAIN_EVERY == 0:
            self.drain()

    def request(
        self, queue: str, body_text: str, headers: Headers = EMPTY_HEADERS, msgid: str | None = None
    ) -> str:
        """Send a REQUEST; returns its msgid."""
        return self.send(
            Request(msgid=msgid or new_msgid(), queue=queue, headers=headers, body_text=body_text)
        )

    def schedule(
        self,
        queue: str,
        body_text: str,
        *,
        interval: int | None = None,
        cron: str | None = None,
        headers: Headers = EMPTY_HEADERS,
    ) -> str:
        return self.send(
            Schedule(
                msgid=new_msgid(),
                queue=queue,
                headers=headers,
                body_text=body_text,
                interval=interval,
                cron=cron,
            )
        )

    def unschedule(
        self,
        queue: str,
        body_text: str,
        *,
        interval: int | None = None,
        cron: str | None = None,
        headers: Headers = EMPTY_HEADERS,
    ) -> str:
        return self.send(
            Unschedule(
                msgid=new_msgid(),
                queue=queue,
                headers=headers,
                body_text=body_text,
                interval=interval,
                cron=cron,
            )
        )

    def drain(self) -> int:
        """Discard acknowledgements the router sent us; returns how many."""
        count = 0
        socket = self.channel.socket
        while socket.poll(0):
            self.channel.recv_frames()
            count += 1
        return count

    def close(self) -> None:
        self.channel.close()


_local = threading.local()


def get_client(addr: str, *, send_timeout: float = 5.0) -> Client:
    """This thread's client for ``addr`` (a new one after fork)."""
    clients: dict[str, Client] | None = getattr(_local, "clients", None)
    pid = os.getpid()
    if clients is None or getattr(_local, "pid", None) != pid:
        # After fork the inherited sockets belong to the parent: never use
        # or close them here, just forget them.
        clients = _local.clients = {}
        _local.pid = pid
    client = clients.get(addr)
    if client is None:
        client = clients[addr] = Client(addr, send_timeout=send_timeout)
    return client


def close_clients() -> None:
    """Close this thread's client sockets (tests, shutdown)."""
    clients: dict[str, Any] = getattr(_local, "clients", None) or {}
    if getattr(_local, "pid", None) == os.getpid():
        for client in clients.values():
            client.close()
    _local.clients = {}
