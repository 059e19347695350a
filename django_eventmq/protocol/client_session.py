"""A client's FEATURES handshake with a router's frontend, sans-IO (no socket, no clock).

There is no INFORM on the frontend: the client sends its FEATURES first, a
router of ours answers with its own, the reference router never does (it
answers nothing, or something else first). The states and their changes are
:data:`.transitions.CLIENT_TABLE`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django_eventmq.protocol.extensions import Features
from django_eventmq.protocol.ids import new_msgid
from django_eventmq.protocol.messages import Message
from django_eventmq.protocol.packed import PACKED
from django_eventmq.protocol.transitions import CLIENT_TABLE, ClientEvent, ClientState, step

_C = ClientState
_CE = ClientEvent


class ClientSession:
    """A client's FEATURES handshake with a router's frontend."""

    def __init__(self, features: Mapping[str, Any]) -> None:
        self.state = _C.IDLE
        self.our_features = dict(features)
        #: The router's answer (None: not yet, or the reference router).
        self.router_features: dict[str, Any] | None = None
        #: REQUESTs may go packed (the answer said ``"packed"``); an attribute,
        #: not a look-up in :attr:`router_features`: the client reads it per job.
        self.send_packed = False
        #: FEATURES answers received so far (a new one says the router read
        #: everything sent before the FEATURES it answers, see :meth:`probe`).
        self.answers = 0
        #: Until when (the caller's clock) an answer to :meth:`ask` may come.
        self.decide_by = 0.0

    def _step(self, event: ClientEvent) -> None:
        self.state = step("client", CLIENT_TABLE, self.state, event)

    def speaks(self, key: str) -> bool:
        return self.router_features is not None and bool(self.router_features.get(key))

    @property
    def asking(self) -> bool:
        """Our FEATURES went and nothing came back yet (before the deadline)."""
        return self.state is _C.ASKING

    def ask(self, now: float, *, wait: float) -> Features:
        """Our FEATURES (sent first on a new socket, or again to re-check the router)."""
        self._step(_CE.ASK)
        self.router_features = None
        self.send_packed = False
        self.decide_by = now + wait
        return Features(msgid=new_msgid(), features=self.our_features)

    def probe(self) -> Features:
        """Our FEATURES again to a router that answered: its next answer comes once
        it read all we sent before (nothing it said is forgotten meanwhile)."""
        self._step(_CE.PROBE)
        return Features(msgid=new_msgid(), features=self.our_features)

    def receive(self, message: Message) -> None:
        """A message from the router."""
        if isinstance(message, Features):
            self.answered(message.features)
        else:
            self.heard()

    def answered(self, features: Mapping[str, Any]) -> None:
        """The router's FEATURES: an answer (to our first FEATURES, a later one, or
        a bulk sender's on the same socket) says the router is ours."""
        self._step(_CE.ANSWER)
        self.router_features = dict(features)
        self.send_packed = bool(features.get(PACKED))
        self.answers += 1

    def heard(self) -> None:
        """Something other than FEATURES came (the client may not decode it: an ACK)."""
        state = self.state
        if state is not _C.ANSWERED and state is not _C.REFERENCE:  # else a self-loop
            self._step(_CE.HEARD)

    def tick(self, now: float) -> None:
        """Time passed: no answer by the deadline means the reference router."""
        if self.state is _C.ASKING and now >= self.decide_by:
            self._step(_CE.DEADLINE)
