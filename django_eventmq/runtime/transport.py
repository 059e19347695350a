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
from typing import Any, Literal, cast

import zmq
from zmq.utils.monitor import recv_monitor_message

from django_eventmq.errors import ConfigurationError, ProtocolError
from django_eventmq.protocol import Message, decode, encode, split_identity
from django_eventmq.protocol.frame_fields import unpack_received
from django_eventmq.protocol.limits import DEFAULT_LIMITS, MAX_FRAMES, MAX_MESSAGE_BYTES, Limits

_SNDMORE = int(zmq.SNDMORE)
_RCVMORE = int(zmq.RCVMORE)
_NOBLOCK = int(zmq.NOBLOCK)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
#: pyzmq's compiled send. ``zmq.Socket.send`` only adds routing-id and group
#: handling (unused here) on top, and that layer was about 40% of a frame's
#: send cost on the ``.delay()`` hot path (benchmarks/README.md).
_raw_send = zmq.backend.Socket.send
_context_pid: int | None = None
_context: zmq.Context[Any] | None = None
_context_lock = threading.Lock()

#: Why a handshake failed (:meth:`Channel.handshake_failures`).
HANDSHAKE_AUTH = "auth"  # the server's ZAP handler refused this peer (key or address)
HANDSHAKE_MECHANISM = "mechanism"  # one side speaks CURVE and the other does not
HANDSHAKE_PROTOCOL = "protocol"  # another ZMTP protocol error
#: The connection dropped mid-handshake: CURVE with the wrong server key, and also,
#: now and then, the first attempt of a mechanism mismatch.
HANDSHAKE_UNCLEAR = "unclear"
_HANDSHAKE_EVENTS = int(
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)
#: A connection's handshake done, the connection gone (:meth:`Channel.peer_connected`),
#: or an attempt to connect refused (:meth:`Channel.unreachable`).
_PEER_EVENTS = int(
    zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED
)


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


#: ZeroMQ's largest HEARTBEAT_TTL (it travels in tenths of a second in 16 bits).
_MAX_HEARTBEAT_TTL_MS = 6_553_500


def heartbeat_options(interval: float, timeout: float) -> dict[int, int]:
    """Socket options for ZMTP heartbeats on a connecting socket (seconds in).

    ZeroMQ PINGs the peer every ``interval`` and drops the connection when
    nothing came back for ``timeout`` (then reconnects as usual); the peer is
    told to drop it after ``timeout`` without a word from us (TTL). Without
    them a half-open connection (a peer frozen, its host gone, a network that
    drops packets) looks up until TCP gives up, hours later, and a DEALER
    keeps queueing toward it. The I/O thread answers PINGs, so a peer that is
    only busy (its Python code not reading) is not taken for dead.
    """
    timeout_ms = int(timeout * 1000)
    return {
        zmq.HEARTBEAT_IVL: int(interval * 1000),
        zmq.HEARTBEAT_TIMEOUT: timeout_ms,
        zmq.HEARTBEAT_TTL: min(timeout_ms, _MAX_HEARTBEAT_TTL_MS),
    }


def new_identity(prefix: str = "") -> bytes:
    """A printable, unique routing identity."""
    return f"{prefix}{uuid.uuid4()}".encode()


def bind_failure(addr: str, exc: zmq.ZMQError, setting: str, option: str | None = None) -> str:
    """One line for a failed bind: the address, its setting, and how to change it."""
    where = f"EVENTMQ['{setting}'], EMQ_{setting}" + (f" or {option}" if option else "")
    if exc.errno == zmq.EADDRINUSE:
        why = "address already in use (another process listens there); stop it, or"
    else:
        why = f"{zmq.strerror(exc.errno) if exc.errno else exc};"  # without pyzmq's repeat of addr
    return f"cannot bind {setting} {addr}: {why} choose another address with {where}"


class Channel:
    """A socket that sends and receives eMQP messages.

    ``router=True`` channels prepend/strip the peer identity frame.

    Every socket refuses frames over ``MAXMSGSIZE`` (ZeroMQ drops the peer)
    and messages over ``max_frames`` (cut short, so decoding refuses them).
    ``limits`` (by default only on ROUTER sockets, where peers' messages come
    in) also bounds bodies and header values of what :meth:`recv` decodes.
    """

    def __init__(
        self,
        kind: int,
        *,
        bind: str | None = None,
        connect: str | Sequence[str] | None = None,
        identity: bytes | None = None,
        hwm: int = 0,
        options: dict[int, Any] | None = None,
        ctx: zmq.Context[Any] | None = None,
        limits: Limits | Literal["default"] | None = "default",
        watch_handshake: bool = False,
        watch_peer: bool = False,
        bind_setting: str | None = None,
        bind_option: str | None = None,
    ) -> None:
        """``bind_setting`` (``FRONTEND_ADDR``, ...) and ``bind_option`` (``--frontend``)
        say where ``bind`` came from: a failed bind then raises a
        :class:`ConfigurationError` naming them instead of a bare ``ZMQError``.
        ``connect`` may name several addresses (a router group, see
        :mod:`.addresses`): the socket connects to each."""
        self.kind = kind
        self._monitor: zmq.Socket[Any] | None = None
        self._failures: list[str] = []
        self._peer_up = False
        self._peer_seen = False  # a handshake succeeded once
        self._connect_failed = False  # an attempt to connect failed
        self._watch_peer = watch_peer
        self.is_router = kind == zmq.ROUTER
        if limits == "default":
            limits = DEFAULT_LIMITS if self.is_router else None
        self.limits: Limits | None = limits
        self.max_frames = limits.max_frames if limits is not None else MAX_FRAMES
        self._keep = self.max_frames + 1  # frames kept beyond: one more, then cut
        self.socket: zmq.Socket[Any] = (ctx or context()).socket(kind)
        try:
            self.socket.setsockopt(zmq.LINGER, 0)
            # A hard per-frame ceiling: a bigger frame costs its sender the connection.
            self.socket.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
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
            if watch_handshake or watch_peer:
                # Before connecting, so no failed handshake goes unseen.
                self._monitor = self.socket.get_monitor_socket(
                    _HANDSHAKE_EVENTS | (_PEER_EVENTS if watch_peer else 0)
                )
            if bind is not None:
                try:
                    self.socket.bind(bind)
                except zmq.ZMQError as exc:
                    if bind_setting is None:
                        raise
                    raise ConfigurationError(
                        bind_failure(bind, exc, bind_setting, bind_option)
                    ) from None
                self.address = self.socket.getsockopt(zmq.LAST_ENDPOINT).decode()
            if connect is not None:
                targets = (connect,) if isinstance(connect, str) else tuple(connect)
                for target in targets:
                    self.socket.connect(target)
                self.address = ",".join(targets)
        except Exception:
            self.close()
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
        send = _raw_send
        sock = self.socket
        last = len(frames) - 1
        more = flags | _SNDMORE
        for index in range(last):
            send(sock, frames[index], more)
        send(sock, frames[last], flags)

    # -- receiving -------------------------------------------------------
    def recv_frames(self, *, flags: int = 0) -> list[bytes]:
        """Receive one multipart message as raw frames.

        A message of more than ``max_frames`` frames comes back cut to
        ``max_frames + 2`` (the rest is read and dropped, so memory stays
        bounded): too many for any eMQP command, so :func:`decode` refuses it
        with a :class:`ProtocolError`. Never raises for bad input, so a caller
        that decodes itself needs no extra ``except``. A packed message comes
        back as it came (its one frame): :meth:`unpacked` gives its frames.
        """
        recv = self.socket.recv
        if self.is_router:
            # A ROUTER's message is its identity and at least one frame: no RCVMORE
            # query for the second (ZeroMQ delivers a message whole).
            return self._rest([recv(flags), recv(flags)], flags)
        return self._rest([recv(flags)], flags)

    def recv_frames_from(self, *, flags: int = 0) -> tuple[list[bytes], str]:
        """:meth:`recv_frames`, and who sent them: the ZAP User-Id of the peer's
        connection (with CURVE, its Z85 public key; "" when no ZAP handler ran)."""
        first = self.socket.recv(flags, copy=False)
        try:
            user = str(first.get("User-Id"))
        except zmq.ZMQError:  # no such property: the connection was not authenticated
            user = ""
        frames = [first.bytes, self.socket.recv(flags)] if self.is_router else [first.bytes]
        return self._rest(frames, flags), user

    def _rest(self, frames: list[bytes], flags: int) -> list[bytes]:
        """The frames of a message whose first ``frames`` were read (see :meth:`recv_frames`)."""
        recv = self.socket.recv
        get = self.socket.getsockopt
        while get(_RCVMORE):
            if len(frames) > self._keep:
                self._drop_rest()
                break
            frames.append(recv(flags))
        return frames

    def unpacked(self, frames: list[bytes]) -> list[bytes]:
        """A packed message as received (``[identity, PACKED]`` or ``[PACKED]``, see
        :mod:`..protocol.packed`) as the frames it carries; one that is not
        well-formed is left as it is (decoding it says why)."""
        return unpack_received(frames, max_frames=self.max_frames)

    def _drop_rest(self) -> None:
        """Read and drop the rest of an over-long message (ZeroMQ delivers it whole)."""
        recv = self.socket.recv
        get = self.socket.getsockopt
        while get(_RCVMORE):
            recv(_NOBLOCK, copy=False)  # a Frame: no bytes object is built

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
            message = decode(frames, admin=admin)
            if self.limits is not None:
                self.limits.check_message(message)
        except ProtocolError as exc:
            exc.identity = identity
            raise
        return identity, list(frames), message

    def poll(self, timeout_ms: int) -> bool:
        """True when a message is waiting (within ``timeout_ms``)."""
        if timeout_ms == 0:
            # zmq.Socket.poll builds a Poller per call; reading EVENTS is the
            # same answer for "now" at a fraction of the cost (hot loops).
            return bool(cast(int, self.socket.get(_EVENTS)) & _POLLIN)
        if self.socket.closed:
            # As Socket.poll: zmq_poll on a closed socket would poll fd 0 (stdin).
            raise zmq.ZMQError(zmq.ENOTSUP)
        # zmq_poll on the one socket: Socket.poll would build a Poller per call.
        return bool(zmq.zmq_poll([(self.socket, zmq.POLLIN)], timeout_ms))

    def handshake_failures(self) -> list[str]:
        """The handshakes of a ``watch_handshake`` channel that failed since the last
        call, as ``HANDSHAKE_*`` (ZeroMQ itself only retries). Never waits."""
        self._read_monitor()
        failures, self._failures = self._failures, []
        return failures

    @property
    def max_frame_bytes(self) -> int:
        """The largest frame this socket takes (its MAXMSGSIZE; a bigger one costs
        the sender the connection): what our FEATURES tell a peer that bundles."""
        size = int(self.socket.getsockopt(zmq.MAXMSGSIZE))
        return MAX_MESSAGE_BYTES if size < 0 else min(size, MAX_MESSAGE_BYTES)

    def peer_connected(self) -> bool | None:
        """For a ``watch_peer`` channel: True while a connection to its peer is up
        (handshake done, not dropped since). A peer's ZeroMQ completes handshakes
        and keeps the connection even while its code reads nothing, so True with
        no answer means a live peer that does not read (a router at its
        high-water mark), not a dead one. None on an unwatched channel. Never waits."""
        if not self._watch_peer or self._monitor is None:
            return None
        self._read_monitor()
        return self._peer_up

    def unreachable(self) -> str:
        """For a ``watch_peer`` channel: why its peer cannot be reached, or "".

        "the connection dropped": one was up and none is now (the peer closed it
        or died; a router that stops or steps down closes it at once, and ZeroMQ
        alone would quietly reconnect to the same address). "no connection
        made": an attempt to connect failed and none was ever made (nothing
        listens there, as at a router group's standby, which binds nothing; or
        the handshake failed). "" on an unwatched channel. Never waits.
        """
        if self.peer_connected() is not False:
            return ""
        if self._peer_seen:
            return "the connection dropped"
        if self._connect_failed:
            return "no connection made (nothing listens there, or the handshake failed)"
        return ""

    def _read_monitor(self) -> None:
        monitor = self._monitor
        failures = self._failures
        while monitor is not None and monitor.poll(0):
            event = recv_monitor_message(monitor)
            if event["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._peer_up = self._peer_seen = True
            elif event["event"] == zmq.EVENT_DISCONNECTED:
                self._peer_up = False
            elif event["event"] == zmq.EVENT_CONNECT_RETRIED:
                self._connect_failed = True
            elif event["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                failures.append(HANDSHAKE_AUTH)
            elif event["event"] == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
                failures.append(HANDSHAKE_UNCLEAR)
            elif event["value"] == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
                failures.append(HANDSHAKE_MECHANISM)
            else:
                failures.append(HANDSHAKE_PROTOCOL)

    def close(self, linger_ms: int = 0) -> None:
        """Close; ``linger_ms`` > 0 lets ZeroMQ deliver what is still queued (in the background)."""
        if self._monitor is not None:
            self.socket.disable_monitor()
            self._monitor.close(linger=0)
            self._monitor = None
        self.socket.close(linger=linger_ms)

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


# Re-exported so the runtime packages name socket kinds without importing zmq.
ROUTER = zmq.ROUTER
DEALER = zmq.DEALER
PUB = zmq.PUB
SUB = zmq.SUB
PULL = zmq.PULL
PUSH = zmq.PUSH
SNDTIMEO = zmq.SNDTIMEO
LINGER = zmq.LINGER
SNDHWM = zmq.SNDHWM  # the router's frontend queues fewer messages per client than it reads
RCVHWM = zmq.RCVHWM  # ... and reads fewer from each client ahead of handling them
#: A DEALER with it queues only toward connected peers: with none, a send waits
#: (up to SNDTIMEO) and then fails instead of keeping the message for later.
IMMEDIATE = zmq.IMMEDIATE
Again = zmq.Again
ContextTerminated = zmq.ContextTerminated
ZMQError = zmq.ZMQError
NOBLOCK = int(zmq.NOBLOCK)  # a plain int: enum flags make every send slower
EHOSTUNREACH = zmq.EHOSTUNREACH
SUBSCRIBE = zmq.SUBSCRIBE  # pubsub: a SUB socket's topic-prefix filter
# The raw poller, for sockets and plain file descriptors at once (the job
# manager waits on its router socket and its children's pipes together).
FdPoller = zmq.Poller
POLLIN = zmq.POLLIN
# Security (see runtime/security.py): CURVE, ZAP and size options for Channel(options=...).
CURVE_SERVER = zmq.CURVE_SERVER
CURVE_SECRETKEY = zmq.CURVE_SECRETKEY
CURVE_PUBLICKEY = zmq.CURVE_PUBLICKEY
CURVE_SERVERKEY = zmq.CURVE_SERVERKEY
ZAP_DOMAIN = zmq.ZAP_DOMAIN
MAXMSGSIZE = zmq.MAXMSGSIZE
Context = zmq.Context  # pubsub: a publish client's own context, terminated to flush on close
