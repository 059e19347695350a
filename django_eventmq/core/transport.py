"""The one module that touches ZeroMQ sockets.

Everything else speaks protocol messages through :class:`Channel`. Sockets
are made in the process and thread that use them, with ``linger=0``, and
every DEALER gets a printable identity: the reference router decodes the
identity frame as UTF-8 and dies on the random binary one a ROUTER would
otherwise assign.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Sequence
from typing import Any

import zmq

from ..errors import ProtocolError
from ..protocol import Message, decode, encode, split_identity

_SNDMORE = int(zmq.SNDMORE)
_RCVMORE = int(zmq.RCVMORE)
_context_pid: int | None = None
_context: zmq.Context[Any] | None = None
_context_lock = threading.Lock()


def context() -> zmq.Context[Any]:
    """This process's ZeroMQ context (a new one after fork)."""
    global _context, _context_pid
    pid = os.getpid()
    if _context is None or _context_pid != pid:
        with _context_lock:
            if _context is None or _context_pid != pid:
                # After fork the parent's context must not be touched, not even
                # terminated: just drop the reference and make our own.
                _context = zmq.Context()
                _context_pid = pid
    return _context


def new_identity(prefix: str = "") -> bytes:
    """A printable, unique routing identity."""
    return f"{prefix}{uuid.uuid4()}".encode()


class Channel:
    """A socket that sends and receives eMQP messages.

    ``router=True`` channels prepend/strip the peer identity frame.
    """

    def __init__(
        self,
        kind: int,
        *,
        bind: str | None = None,
        connect: str | None = None,
        identity: bytes | None = None,
        hwm: int = 0,
        options: dict[int, Any] | None = None,
        ctx: zmq.Context[Any] | None = None,
    ) -> None:
        self.kind = kind
        self.is_router = kind == zmq.ROUTER
        self.socket: zmq.Socket[Any] = (ctx or context()).socket(kind)
        try:
            self.socket.setsockopt(zmq.LINGER, 0)
            self.socket.setsockopt(zmq.SNDHWM, hwm)
            self.socket.setsockopt(zmq.RCVHWM, hwm)
            if kind == zmq.ROUTER:
                # Fail loudly instead of silently dropping a message for a
                # peer that has gone away.
                self.socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
            if kind == zmq.DEALER or identity is not None:
                self.identity = identity or new_identity()
                self.socket.setsockopt(zmq.IDENTITY, self.identity)
            else:
                self.identity = b""
            for option, value in (options or {}).items():
                self.socket.setsockopt(option, value)
            self.address = ""
            if bind is not None:
                self.socket.bind(bind)
                self.address = self.socket.getsockopt(zmq.LAST_ENDPOINT).decode()
            if connect is not None:
                self.socket.connect(connect)
                self.address = connect
        except Exception:
            self.socket.close(linger=0)
            raise

    # -- sending ---------------------------------------------------------
    # Frames are sent and received one by one with plain int flags: for the
    # small frames of eMQP this is 1.3-2.5x faster than send_multipart /
    # recv_multipart (which build frame objects and combine enum flags per
    # frame). ZeroMQ still delivers a multipart message whole or not at all.

    def send(self, message: Message, *, flags: int = 0) -> None:
        """Send on a DEALER-like socket."""
        self.send_frames(encode(message), flags=flags)

    def send_to(self, identity: bytes, message: Message, *, flags: int = 0) -> None:
        """Send to one peer of a ROUTER socket."""
        frames = encode(message)
        frames.insert(0, identity)
        self.send_frames(frames, flags=flags)

    def send_frames(self, frames: Sequence[bytes], *, flags: int = 0) -> None:
        """Send already-encoded frames (used to forward a message unchanged)."""
        send = self.socket.send
        last = len(frames) - 1
        more = flags | _SNDMORE
        for index in range(last):
            send(frames[index], more)
        send(frames[last], flags)

    # -- receiving -------------------------------------------------------
    def recv_frames(self, *, flags: int = 0) -> list[bytes]:
        """Receive one multipart message as raw frames."""
        recv = self.socket.recv
        get = self.socket.getsockopt
        frames: list[bytes] = [recv(flags)]
        while get(_RCVMORE):
            frames.append(recv(flags))
        return frames

    def recv(self, *, flags: int = 0, admin: bool = False) -> tuple[bytes, list[bytes], Message]:
        """Receive and decode one message.

        Returns ``(identity, frames, message)``; identity is ``b""`` on
        non-ROUTER sockets and ``frames`` excludes it. Raises
        :class:`ProtocolError` (carrying the raw frames) for a malformed
        message; the message has been consumed either way.
        """
        raw = self.recv_frames(flags=flags)
        if self.is_router:
            identity, frames = split_identity(raw)
        else:
            identity, frames = b"", raw
        try:
            return identity, list(frames), decode(frames, admin=admin)
        except ProtocolError as exc:
            exc.identity = identity
            raise

    def poll(self, timeout_ms: int) -> bool:
        """True when a message is waiting (within ``timeout_ms``)."""
        return bool(self.socket.poll(timeout_ms, zmq.POLLIN))

    def close(self) -> None:
        self.socket.close(linger=0)

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Poller:
    """Waits on several channels at once."""

    def __init__(self, *channels: Channel) -> None:
        self._poller = zmq.Poller()
        self._by_socket: dict[Any, Channel] = {}
        for channel in channels:
            self.register(channel)

    def register(self, channel: Channel) -> None:
        self._poller.register(channel.socket, zmq.POLLIN)
        self._by_socket[channel.socket] = channel

    def unregister(self, channel: Channel) -> None:
        self._poller.unregister(channel.socket)
        self._by_socket.pop(channel.socket, None)

    def poll(self, timeout_ms: int) -> list[Channel]:
        """Channels with a message waiting, after at most ``timeout_ms``."""
        return [self._by_socket[sock] for sock, _ in self._poller.poll(timeout_ms)]


# Re-exported so the rest of core names socket kinds without importing zmq.
ROUTER = zmq.ROUTER
DEALER = zmq.DEALER
PUB = zmq.PUB
SUB = zmq.SUB
PULL = zmq.PULL
PUSH = zmq.PUSH
SNDTIMEO = zmq.SNDTIMEO
Again = zmq.Again
ContextTerminated = zmq.ContextTerminated
ZMQError = zmq.ZMQError
NOBLOCK = int(zmq.NOBLOCK)  # a plain int: enum flags make every send slower
EHOSTUNREACH = zmq.EHOSTUNREACH
