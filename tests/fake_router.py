"""A stand-in for the router's backend: a raw ROUTER socket the tests drive by hand."""

from __future__ import annotations

import time
from typing import Any, TypeVar

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import (
    Ack,
    Cancel,
    Features,
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
from django_eventmq.protocol.packed import PACKED, pack
from django_eventmq.runtime import transport

M = TypeVar("M", bound=Message)

SAMPLE = "tests.jobs_fixtures.sample"

#: What a router of ours announces after its ACK.
ROUTER_FEATURES = {"cancel": 1, "done": 1, "nack": 1}


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
        #: Send REQUESTs packed (as a router of ours does to a job manager that reads them).
        self.send_packed = False
        self._cursor = 0

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
            try:
                message = decode(raw[1:])
            except ProtocolError as exc:
                self.malformed.append(exc)
                continue
            if len(raw) == 2:
                self.arrived_packed.append(message.command)
            self.received.append((raw[0], message))

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
        packed: bool = False,
    ) -> tuple[bytes, Inform]:
        """Wait for INFORM, ACK it and send a HEARTBEAT; returns (identity, inform).

        ``features=True`` speaks like a router of ours: FEATURES right after the ACK.
        ``heartbeat=False`` sends nothing after the ACK (a quiet reference router).
        ``packed=True`` also says, in that FEATURES, that we read packed messages.
        """
        identity, inform = self.expect(Inform, timeout)
        self.send(identity, Ack(msgid=new_msgid(), ack_msgid=inform.msgid))
        if features:
            said = {**ROUTER_FEATURES, PACKED: 1} if packed else ROUTER_FEATURES
            self.send(identity, Features(msgid=new_msgid(), features=said))
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
        if self.send_packed and isinstance(message, Request):
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
