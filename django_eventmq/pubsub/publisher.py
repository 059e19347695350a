"""The publisher process: takes PUBLISH messages in and fans them out to subscribers.

Incoming is a ROUTER socket, as in the reference: publishers (our
``publish()`` and the reference's ``send_publish_request``) are DEALERs, and
ZeroMQ does not pair a DEALER with a PULL. Nothing is ever sent back, so a
client never has replies piling up in its socket.

Outgoing is a PUB socket that sends ``[TOPIC, MSG]``, the frames the
reference's publisher sends: the topic is the first frame, so ZeroMQ's SUB
prefix filter ("orders." matches "orders.created") does the matching, on the
publisher's side, and a plain SUB written for the reference reads ours.

What is dropped, and when (the publisher never waits for a subscriber):

- A PUB socket drops a message for one subscriber when that subscriber's
  queue is full (``hwm`` messages here, plus kernel buffers, plus the
  subscriber's own receive queue). What is queued is kept and delivered in
  order; the new messages that come while it is full are dropped (newest
  lost, not oldest). Other subscribers are not affected.
- A subscriber that is not connected (or whose subscription has not reached
  us yet) gets nothing published meanwhile: there is no store or replay.
- A malformed message is logged once per (peer, reason) and dropped; the
  headers of the 3-frame client form are not forwarded.
- So is a PUBLISH whose body is over ``MAX_BODY_BYTES``, is not JSON (eMQP's
  ``JSON_MSG``; subscribers could not read it) or nests deeper than
  ``MAX_JSON_DEPTH``, and one whose headers are out of bounds.

With ``CURVE_SERVER_SECRET_KEY`` set both sockets speak CURVE and accept only
``CURVE_PUBLISHER_CLIENTS`` (or, if empty, ``CURVE_FRONTEND_CLIENTS``): a
:class:`~.security.Guard` runs the ZAP check while they are bound.
"""

from __future__ import annotations

import logging

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import Publish, decode_json
from django_eventmq.protocol.frame_fields import published_frames
from django_eventmq.protocol.limits import OverLimit
from django_eventmq.runtime import security, transport
from django_eventmq.runtime.outbox import WarnOnce
from django_eventmq.runtime.service import Service
from django_eventmq.runtime.settings import Settings
from django_eventmq.runtime.transport import Channel

log = logging.getLogger("django_eventmq.publisher")

#: Messages queued per subscriber before new ones for it are dropped.
PUBLISHER_SNDHWM = 10_000
#: PUBLISH messages buffered on the incoming socket (beyond this, senders wait).
INCOMING_RCVHWM = 100_000
#: Messages handled per wake-up before polling again (keeps stop() responsive).
DRAIN_CAP = 1024


class Publisher(Service):
    """Binds the incoming and outgoing sockets and relays PUBLISH messages."""

    label = "publisher"
    log = log

    def __init__(self, settings: Settings, *, hwm: int = PUBLISHER_SNDHWM) -> None:
        super().__init__()
        self.settings = settings
        self.hwm = hwm
        self.incoming_address = ""
        self.outgoing_address = ""
        #: Messages relayed and messages dropped as malformed (for tests and logs).
        self.published = 0
        self.rejected = 0
        self._warn = WarnOnce(log)
        self._incoming: Channel | None = None
        self._outgoing: Channel | None = None
        self._guard = security.Guard(settings, (security.PUBLISHER,))
        self._limits = security.limits_from_settings(settings)

    # -- lifecycle (run() and stop() come from Service) ----------------------------
    def start(self) -> None:
        """Bind both sockets (in the calling thread) and log the ready line."""
        if self._incoming is not None:
            return
        try:
            # The ZAP handler must serve before a CURVE socket binds, or
            # ZeroMQ would let any key in.
            self._guard.start()
            options = security.secure_channel_options(
                self.settings, security.PUBLISHER, security.SERVER
            )
            self._incoming = Channel(
                transport.ROUTER,
                bind=self.settings.publisher_incoming_addr,
                hwm=INCOMING_RCVHWM,
                options=options,
                limits=self._limits,
                bind_setting="PUBLISHER_INCOMING_ADDR",
                bind_option="--incoming",
            )
            self._outgoing = Channel(
                transport.PUB,
                bind=self.settings.publisher_outgoing_addr,
                hwm=self.hwm,
                options=options,
                bind_setting="PUBLISHER_OUTGOING_ADDR",
                bind_option="--outgoing",
            )
        except BaseException:
            self.close()
            raise
        self.incoming_address = self._incoming.address
        self.outgoing_address = self._outgoing.address
        log.info(
            "publisher ready: incoming=%s outgoing=%s",
            self.incoming_address,
            self.outgoing_address,
        )

    def close(self) -> None:
        """Close the sockets, then stop the ZAP check (idempotent)."""
        try:
            for channel in (self._incoming, self._outgoing):
                if channel is not None:
                    channel.close()
        finally:
            self._incoming = self._outgoing = None
            self._guard.stop()

    def summary(self) -> str:
        return f": {self.published} published, {self.rejected} rejected"

    # -- relaying --------------------------------------------------------------
    def loop_once(self, timeout_ms: int = 100) -> int:
        """Wait up to ``timeout_ms`` for messages and relay those ready; returns how many."""
        if self._incoming is None:
            self.start()
        incoming, outgoing = self._incoming, self._outgoing
        assert incoming is not None and outgoing is not None
        if not incoming.poll(timeout_ms):
            return 0
        relayed = 0
        for _ in range(DRAIN_CAP):
            try:
                identity, _frames, message = incoming.recv(flags=transport.NOBLOCK)
            except transport.Again:
                break
            except ProtocolError as exc:
                self.rejected += 1
                action = "dropped" if isinstance(exc, OverLimit) else "dropped malformed message"
                self._warn("incoming", exc.identity, exc.reason, action)
                continue
            if not isinstance(message, Publish):
                self.rejected += 1
                self._warn("incoming", identity, f"unexpected command {message.command}")
                continue
            try:
                # Parsed only to be checked: what is relayed is the sender's text.
                decode_json(
                    message.body_text,
                    "PUBLISH body",
                    max_depth=self._limits.max_json_depth,
                    max_bytes=self._limits.max_body_bytes,
                )
            except ProtocolError as exc:
                self.rejected += 1
                self._warn("incoming", identity, exc.reason, "dropped")
                continue
            # A PUB socket never blocks: for a subscriber whose queue is full
            # ZeroMQ drops the message (NOBLOCK only guards against surprises).
            outgoing.send_frames(
                published_frames(message.topic.encode(), message.body_text.encode()),
                flags=transport.NOBLOCK,
            )
            self.published += 1
            relayed += 1
        return relayed
