"""The one fake router for tests: a raw ROUTER socket the tests drive by hand.

It stands in for the router's backend. Its view of each job manager is the
router side of the protocol session (:class:`RouterPeerSession`): the INFORM
is answered with what the session says (ACK, and with ``features=True``
every FEATURES key our router announces, :data:`ROUTER_FEATURES`), and what
the job manager sends goes through the session, so :meth:`FakeRouter.peer`
knows what it announced and its credit, and jobs go to it packed once it
said it reads them, as our router does.

Schedulers talk to the frontend, where there is no FEATURES exchange: for
them :meth:`FakeRouter.ack_informs` ACKs each INFORM and
:meth:`FakeRouter.heartbeat_all` keeps them alive. Blocking clients need a
router that answers while they wait: :class:`ScriptedRouter` serves the same
fake from a thread, answering as a test's script says.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeVar

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import (
    Ack,
    Cancel,
    Headers,
    Heartbeat,
    Inform,
    JobBody,
    Message,
    Request,
    decode,
    encode,
    new_msgid,
)
from django_eventmq.protocol.batch import unpack_jobs
from django_eventmq.protocol.bundle import is_bundle, unbundle
from django_eventmq.protocol.features import ROUTER_FEATURES
from django_eventmq.protocol.packed import pack
from django_eventmq.protocol.session import RouterPeerSession
from django_eventmq.runtime import transport
from tests.support import wait_for

M = TypeVar("M", bound=Message)

SAMPLE = "tests.jobs_fixtures.sample"


def body(callable_name: str, *args: Any, path: str = SAMPLE, **kwargs: Any) -> str:
    return JobBody(path=path, callable=callable_name, args=args, kwargs=kwargs).encode()


class FakeRouter:
    """Binds a ROUTER on a random loopback port; records everything it receives."""

    def __init__(self) -> None:
        self.channel = transport.Channel(transport.ROUTER, bind="tcp://127.0.0.1:*")
        self.addr = self.channel.address
        #: (identity, message) in arrival order.
        self.received: list[tuple[bytes, Message]] = []
        self.malformed: list[ProtocolError] = []
        #: Commands that arrived packed (one frame), in arrival order.
        self.arrived_packed: list[str] = []
        #: How many messages each bundle that arrived carried, in arrival order.
        self.arrived_bundled: list[int] = []
        #: Messages the sender's session refused (illegal in its state), in arrival order.
        self.illegal: list[ProtocolError] = []
        self._peers: dict[bytes, RouterPeerSession] = {}
        #: Peers whose INFORM :meth:`ack_informs` answered (and that are still there).
        self.peers: set[bytes] = set()
        self._acked: set[str] = set()
        self._cursor = 0

    def peer(self, identity: bytes) -> RouterPeerSession:
        """Our view of the job manager ``identity`` (after :meth:`handshake`)."""
        self.pump(0)
        return self._peers[identity]

    def close(self) -> None:
        self.channel.close()

    def pump(self, timeout: float = 0.05) -> None:
        """Receive whatever arrives within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            left = max(0, int((deadline - time.monotonic()) * 1000))
            if not self.channel.poll(left):
                return
            raw = self.channel.recv_frames()
            if len(raw) == 2 and is_bundle(raw[1]):
                # A bundle (protocol/bundle.py): its messages one by one, as ours reads it.
                try:
                    inner = unbundle(raw[1], [raw[0]])
                except ProtocolError as exc:
                    self.malformed.append(exc)
                    continue
                self.arrived_bundled.append(len(inner))
            else:
                inner = [raw]
            for frames in inner:
                try:
                    message = decode(frames[1:])
                except ProtocolError as exc:
                    self.malformed.append(exc)
                    continue
                if len(frames) == 2:
                    self.arrived_packed.append(message.command)
                self._converse(frames[0], message)
                self.received.append((frames[0], message))

    def _converse(self, identity: bytes, message: Message) -> None:
        peer = self._peers.get(identity)
        if peer is not None and not isinstance(message, Inform):
            try:
                peer.receive(message)
            except ProtocolError as exc:
                self.illegal.append(exc)

    def expect(self, kind: type[M], timeout: float = 10.0, **fields: Any) -> tuple[bytes, M]:
        """The next not-yet-consumed message of ``kind`` (matching ``fields``)."""
        deadline = time.monotonic() + timeout
        while True:
            for index in range(self._cursor, len(self.received)):
                identity, message = self.received[index]
                if isinstance(message, kind) and all(
                    getattr(message, k) == v for k, v in fields.items()
                ):
                    self.received[index] = (identity, _Consumed(msgid=message.msgid))
                    return identity, message
            if time.monotonic() > deadline:
                seen = [type(m).__name__ for _, m in self.received[self._cursor :]]
                raise AssertionError(f"no {kind.__name__} {fields} within {timeout}s; saw {seen}")
            self.pump(0.05)

    def of(self, kind: type[M]) -> list[tuple[bytes, M]]:
        """Every (identity, message) of ``kind`` received so far."""
        return [(i, m) for i, m in self.received if isinstance(m, kind)]

    def wait_for(
        self,
        kind: type[M],
        count: int = 1,
        timeout: float = 5.0,
        tick: Callable[[], object] | None = None,
    ) -> list[tuple[bytes, M]]:
        """Wait until ``count`` messages of ``kind`` arrived; ``tick()`` runs between polls."""

        def check() -> list[tuple[bytes, M]] | None:
            if tick is not None:
                tick()
            self.pump(0.01)
            found = self.of(kind)
            return found if len(found) >= count else None

        found: list[tuple[bytes, M]] = wait_for(
            check, timeout, f"{count} {kind.__name__} at the fake router"
        )
        return found

    def ack_informs(self) -> list[bytes]:
        """ACK every INFORM seen and not yet answered (and say HEARTBEAT); returns identities."""
        done = []
        for identity, message in self.of(Inform):
            if message.msgid in self._acked:
                continue
            self._acked.add(message.msgid)
            try:
                self.channel.send_to(identity, Ack(msgid=new_msgid(), ack_msgid=message.msgid))
                self.channel.send_to(identity, Heartbeat(msgid=new_msgid(), timestamp=0.0))
            except transport.ZMQError:
                # That connection is gone: the peer gave up waiting for this ACK
                # (a slow start on a busy machine) and reconnects with a new INFORM.
                continue
            self.peers.add(identity)
            done.append(identity)
        return done

    def heartbeat_all(self) -> None:
        """A HEARTBEAT to every peer :meth:`ack_informs` answered."""
        for identity in list(self.peers):
            try:
                self.channel.send_to(identity, Heartbeat(msgid=new_msgid(), timestamp=0.0))
            except transport.ZMQError:  # that peer has gone away
                self.peers.discard(identity)

    def send_frames(self, identity: bytes, frames: Sequence[bytes]) -> None:
        """Raw frames to ``identity`` (for messages no encoder would make)."""
        self.channel.send_frames([identity, *frames])

    def count(self, kind: type[Message], identity: bytes | None = None) -> int:
        return sum(
            1
            for ident, m in self.received
            if isinstance(m, kind) and (identity is None or ident == identity)
        )

    def wait_count(
        self, kind: type[Message], n: int, identity: bytes | None = None, timeout: float = 10.0
    ) -> None:
        """Wait until at least ``n`` messages of ``kind`` (from ``identity``) arrived."""
        deadline = time.monotonic() + timeout
        while self.count(kind, identity) < n:
            if time.monotonic() > deadline:
                got = self.count(kind, identity)
                raise AssertionError(f"{got} {kind.__name__} of {n} within {timeout}s")
            self.pump(0.02)

    def skip_seen(self) -> None:
        """Forget what arrived so far (later expects only see newer messages)."""
        self.pump(0)
        self._cursor = len(self.received)

    def handshake(
        self,
        timeout: float = 20.0,
        *,
        features: bool = False,
        heartbeat: bool = True,
        without: Collection[str] = (),
    ) -> tuple[bytes, Inform]:
        """Wait for INFORM, ACK it and send a HEARTBEAT; returns (identity, inform).

        ``features=True`` speaks like a router of ours: FEATURES right after the
        ACK, with every key ours announces but those named in ``without``.
        ``heartbeat=False`` sends nothing after the ACK (a quiet reference router).
        """
        identity, inform = self.expect(Inform, timeout)
        said = {key: value for key, value in ROUTER_FEATURES.items() if key not in without}
        peer = self._peers[identity] = RouterPeerSession(features=said)
        ack, our_features = peer.receive(inform)
        self.send(identity, ack)
        if features:
            self.send(identity, our_features)
        if heartbeat:
            self.send(identity, Heartbeat(msgid=new_msgid(), timestamp=time.time()))
        return identity, inform

    def commands(self, identity: bytes) -> list[str]:
        """The commands received from ``identity`` so far, in arrival order."""
        self.pump(0)
        return [m.command for ident, m in self.received if ident == identity]

    def cancel(self, identity: bytes, job_msgid: str) -> None:
        self.send(identity, Cancel(msgid=new_msgid(), job_msgid=job_msgid))

    def send(self, identity: bytes, message: Message) -> None:
        peer = self._peers.get(identity)
        if peer is not None and peer.packed and isinstance(message, Request):
            self.channel.send_frames([identity, pack(encode(message))])
        else:
            self.channel.send_to(identity, message)

    def request(
        self,
        identity: bytes,
        body_text: str,
        *,
        reply: bool = False,
        queue: str = "default",
        msgid: str | None = None,
        **headers_fields: Any,
    ) -> str:
        msgid = msgid or new_msgid()
        headers = Headers(reply_requested=reply, **headers_fields)
        self.send(identity, Request(msgid=msgid, queue=queue, headers=headers, body_text=body_text))
        return msgid


class _Consumed(Message):
    """Placeholder for a message an expect() already returned."""

    command = "CONSUMED"


Answer = Callable[[list[bytes], int], list[list[bytes]]]


class ScriptedRouter:
    """The fake router served from a thread, for blocking clients: ``answer(frames, n)``
    gives the replies to the n-th message received (frames without the identity).

    Received messages (identity left out) are kept in ``received``.
    ``features_aside`` (the default): like the reference router it never
    answers FEATURES (kept in ``features``, not passed to ``answer``), so a
    pipeline sends it REQUESTs only.
    """

    def __init__(self, answer: Answer, *, features_aside: bool = True) -> None:
        # Made here, used only by the thread from its start on.
        self.router = FakeRouter()
        self.addr = self.router.addr
        self.answer = answer
        self.features_aside = features_aside
        self.received: list[list[bytes]] = []
        self.features: list[list[bytes]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ScriptedRouter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.router.close()

    def batches(self) -> list[tuple[bytes, list[bytes]]]:
        """(batch msgid, job msgids) of every BATCH received, in order."""
        return [
            (f[3], [job[0] for job in unpack_jobs(f[4])]) for f in self.received if f[2] == b"BATCH"
        ]

    def _run(self) -> None:
        channel = self.router.channel
        while not self._stop.is_set():
            if not channel.poll(20):
                continue
            frames = channel.recv_frames()
            if self.features_aside and frames[3:4] == [b"FEATURES"]:
                self.features.append(frames[1:])
                continue
            self.received.append(frames[1:])
            for reply in self.answer(frames[1:], len(self.received)):
                channel.send_frames([frames[0], *reply])
