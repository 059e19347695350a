"""The client's FEATURES handshake on one DEALER: what we offer, what the router answered.

One :class:`Handshake` per socket, shared by whatever sends on it: the
:class:`~.connection.Client` (packed REQUESTs once the answer says
``"packed"``) and a :class:`~.bulk.Pipeline` on the same socket (BATCH once
it says ``"batch"``), so an answer read by either is known to both. A
pipeline with a socket of its own (Spark) makes its own.

The state of the exchange (asked, answered, the reference router that never
answers) is :class:`~django_eventmq.protocol.client_session.ClientSession`'s; this
object adds the socket: sending our FEATURES, at once or when a router is
connected, and remembering one that could not go yet.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from django_eventmq.protocol import encode
from django_eventmq.protocol.bundle import BUNDLE
from django_eventmq.protocol.client_session import ClientSession
from django_eventmq.protocol.limits import MAX_MESSAGE_BYTES
from django_eventmq.protocol.packed import PACKED
from django_eventmq.runtime import transport

#: What a client (and a pipeline) tells the router it speaks; its ``"bundle"``
#: value is the largest frame its socket takes (:func:`client_features`).
CLIENT_FEATURES = {"batch": 1, PACKED: 1, BUNDLE: MAX_MESSAGE_BYTES}


def client_features(channel: transport.Channel) -> dict[str, Any]:
    """:data:`CLIENT_FEATURES` for ``channel``: bundles of ACKs to it are cut at the
    largest frame it takes (a bigger one would cost it the connection)."""
    return {**CLIENT_FEATURES, BUNDLE: channel.max_frame_bytes}


class Handshake:
    """Our FEATURES on ``channel`` and the router's answer."""

    def __init__(
        self,
        channel: transport.Channel,
        *,
        wait: float,
        known: Mapping[str, Any] | None = None,
    ) -> None:
        """``wait``: seconds an answer may take (a router of ours answers within
        ``SEND_TIMEOUT``). ``known``: the router's answer to an earlier handshake
        on this socket (nothing is asked again)."""
        self.channel = channel
        self.wait = wait
        self.session = ClientSession(client_features(channel))
        #: Our FEATURES could not go yet (no router connected): sent before the next job.
        self.unsent = False
        if known is not None:
            self.session.ask(time.monotonic(), wait=0.0)
            self.session.answered(known)

    @property
    def router_features(self) -> dict[str, Any] | None:
        """The router's FEATURES once it answered ours (None: not yet, or a reference
        router)."""
        return self.session.router_features

    def _features(self) -> list[bytes]:
        return encode(self.session.ask(time.monotonic(), wait=self.wait))

    def ask(self) -> bool:
        """Send our FEATURES without waiting (REQUESTs go plain until the answer comes;
        a reference router ignores it). False, and :attr:`unsent`, if the socket did
        not take it now."""
        try:
            self.channel.send_frames(self._features(), flags=transport.NOBLOCK)
        except transport.Again:
            self.unsent = True
            return False
        self.unsent = False
        return True

    def ask_waiting(self) -> None:
        """Send our FEATURES, waiting as long as the socket's send timeout for a
        router to take it; raises ``transport.Again`` if none did."""
        self.channel.send_frames(self._features())
        self.unsent = False

    def probe(self) -> list[bytes]:
        """Our FEATURES again to a router that answered: its next answer comes once it
        read everything sent before."""
        return encode(self.session.probe())

    def answered(self, features: Mapping[str, Any]) -> None:
        """The router's FEATURES, read by whoever reads the socket."""
        self.session.answered(features)
