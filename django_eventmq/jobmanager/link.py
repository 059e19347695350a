"""A job manager's connection to the router: INFORM, heartbeats, reconnect with back-off.

One DEALER socket to the router's backend, replaced (with a new identity and
a fresh INFORM) when the router goes quiet or says goodbye. ``WORKER_ADDR``
may list the members of a router group: the socket connects to one address
at a time (a DEALER connected to two live routers would share READY and DONE
between them), and moves on to the next when that one does not ACK our
INFORM within :data:`~django_eventmq.runtime.addresses.HANDSHAKE_WAIT`, drops
the connection, or goes silent past the heartbeat timeout. Our FEATURES
answer names the jobs we hold (``"holding"``), so a router that took over
after a failover knows they are running here. The conversation
on each socket (ACK, FEATURES, credit) is a
:class:`~django_eventmq.protocol.session.JobManagerSession`: every message
read goes through it first, and its answers go out here. What else travels
over the socket is the job manager's business; this module only keeps it alive.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import (
    Heartbeat,
    Kbai,
    Liveness,
    Message,
    decode,
    encode,
    new_msgid,
)
from django_eventmq.protocol.bundle import PREFIX as BUNDLE_PREFIX
from django_eventmq.protocol.bundle import bundle, runs, unbundle
from django_eventmq.protocol.codec import packed_request, plain_request
from django_eventmq.protocol.features import HOLDING, with_bundle_bytes
from django_eventmq.protocol.packed import pack
from django_eventmq.protocol.session import JobManagerSession
from django_eventmq.runtime import security, transport
from django_eventmq.runtime.addresses import AddressCycle, parse_addresses
from django_eventmq.runtime.settings import Settings
from django_eventmq.runtime.waitlog import RouterWait

logger = logging.getLogger("django_eventmq.jobmanager")

#: First reconnect delay in seconds; doubles per failed attempt up to
#: ``RECONNECT_MAX_DELAY``.
RECONNECT_MIN_DELAY = 0.1
#: Seconds between two looks at whether the connection dropped (several addresses).
PEER_CHECK_EVERY = 0.1
#: Seconds a connection that was up may still take, once closed, to deliver what was
#: sent on it (the DONEs of jobs that ended as we stop or reconnect): a busy router
#: may not read them at once, and dropped they were lost (the job ran again). At a
#: stop, :meth:`RouterLink.close` waits up to this long for them.
CLOSE_LINGER = 5.0

T = TypeVar("T")


class RouterLink(Generic[T]):
    """The socket to the router, its liveness, and the conversation on it.

    ``T`` is what the job manager holds in the session while the mode is not settled.
    """

    def __init__(
        self,
        settings: Settings,
        poller: transport.FdPoller,
        holding: Callable[[], list[str]] | None = None,
        *,
        addresses: Sequence[str] | None = None,
    ) -> None:
        """``holding``: the msgids of the jobs the job manager holds and has not
        reported (told to each router we connect to, in our FEATURES answer).
        ``addresses``: the members of the router group this link talks to (a job
        manager of several groups has a link per group); by default
        ``WORKER_ADDR``, which must then name one group."""
        self.settings = settings
        if addresses is None:
            addresses = parse_addresses(settings.worker_addr, "WORKER_ADDR")
        self.addresses = AddressCycle(addresses)
        self._holding = holding
        self._poller = poller
        self.channel: transport.Channel | None = None
        #: The link's own ZeroMQ context: terminating it at the end waits for what
        #: its closed sockets still deliver (CLOSE_LINGER), and for nothing else's.
        self._context: transport.Context[Any] | None = None
        #: The conversation on the current socket (a closed one until the first connect).
        self.session: JobManagerSession[T] = JobManagerSession()
        self.session.close()
        self.heard_any = False
        #: While :meth:`messages` hands out a message: True when nothing follows it,
        #: neither in its bundle nor waiting on the socket.
        self.quiet = False
        #: Times a router we had heard on a socket went silent past the heartbeat timeout.
        self.heartbeats_missed = 0
        self._liveness: Liveness | None = None
        self._backoff = RECONNECT_MIN_DELAY
        self._reconnect_at: float | None = None
        #: When an unanswered INFORM makes us try the next address.
        self._answer_by = 0.0
        #: When to look again whether the connection dropped (several addresses).
        self._next_peer_check = 0.0
        self.waiting = RouterWait(logger, "jobmanager", self.addresses.label)
        #: What this turn sends, to go as one bundle at its end (:meth:`flush`),
        #: once the router said it reads bundles.
        self._unsent: list[list[bytes]] = []
        # Built once: a bad key setting fails at start-up, naming the setting.
        self._options = security.secure_channel_options(settings, security.BACKEND, security.CLIENT)

    @property
    def addr(self) -> str:
        """The router address we talk to (or try) now."""
        return self.addresses.current

    def connect(self, now: float) -> None:
        """A new socket (new identity) to the current address, and an INFORM on it."""
        several = self.addresses.several
        if self._context is None:
            self._context = transport.Context()
        channel = transport.Channel(
            transport.DEALER,
            ctx=self._context,
            connect=self.addr,
            watch_peer=several,
            identity=transport.new_identity("jm-"),
            # CURVE keys when the router asks for them (its backend role), and
            # MAXMSGSIZE always: a router cannot flood us with one huge frame.
            # A router of ours hands jobs out packed once we said we read them; they
            # reach messages() as the one frame, where a REQUEST goes straight to its
            # fields (codec.packed_request) and anything else is unpacked there.
            options=self._options,
        )
        self.channel = channel
        self._poller.register(channel.socket, transport.POLLIN)
        self.heard_any = False
        self._reconnect_at = None
        self._liveness = Liveness(
            now, interval=self.settings.heartbeat_interval, timeout=self.settings.heartbeat_timeout
        )
        self._answer_by = now + self.addresses.handshake_wait(self.settings.heartbeat_timeout)
        self._next_peer_check = now + PEER_CHECK_EVERY
        # A new conversation; outcomes still held carry over to it.
        self.session = self.session.successor()
        holding = self._holding() if self._holding is not None else []
        features = {k: v for k, v in self.session.our_features.items() if k != HOLDING}
        # Bundles the router sends us are cut at what our socket takes (MAXMSGSIZE).
        features = with_bundle_bytes(features, self.settings.max_message_bytes)
        if holding:
            # A router that took over from another (a failover) has these jobs
            # as waiting: told, it need not hand them out again while they run.
            features[HOLDING] = holding
        self.session.our_features = features
        channel.send(self.session.inform(self.settings.queues))

    @property
    def connected(self) -> bool:
        """Our INFORM was ACKed on the current socket."""
        return self.session.connected

    def messages(self, now: float) -> Iterator[Message]:
        """Every message waiting on the socket (malformed ones are logged and dropped);
        a bundle's (:mod:`..protocol.bundle`) one by one, each as if it came alone."""
        channel = self.channel
        self.quiet = False
        while channel is not None and self.channel is channel:
            try:
                raw = channel.recv_frames(flags=transport.NOBLOCK)
            except transport.Again:
                self.quiet = True
                return
            if len(raw) == 1 and raw[0].startswith(BUNDLE_PREFIX):
                try:
                    inner = unbundle(raw[0], max_frames=channel.max_frames)
                except ProtocolError as exc:
                    logger.warning("dropped a malformed bundle from the router: %s", exc)
                    continue
            else:
                inner = [raw]
            last = len(inner) - 1
            asked = False
            for position, frames in enumerate(inner):
                if self.channel is not channel:
                    return  # the socket was dropped: the rest came on it
                try:
                    # A REQUEST straight to its fields, packed (alone or in a bundle)
                    # or plain (in a bundle); anything else decoded as any message.
                    packed = len(frames) == 1
                    message: Message | None = (
                        packed_request(frames[0]) if packed else plain_request(frames)
                    )
                    if message is None:
                        message = decode(channel.unpacked(frames) if packed else frames)
                    if channel.limits is not None:
                        channel.limits.check_message(message)
                except ProtocolError as exc:
                    logger.warning("dropped a malformed message from the router: %s", exc)
                    continue
                assert self._liveness is not None
                self._liveness.heard(now)
                self.heard_any = True
                if position == last:
                    # Asked once a read, before its last message is handled: ZMQ_EVENTS
                    # costs a quarter of a receive that finds nothing (zmq.Again).
                    self.quiet, asked = not channel.poll(0), True
                if self._converse(channel, message, now):
                    yield message
            if not asked:
                self.quiet = not channel.poll(0)
            if self.quiet:
                return

    def _converse(self, channel: transport.Channel, message: Message, now: float) -> bool:
        """Pass ``message`` through the session and send its answers; False to drop it."""
        session = self.session
        was_connected = session.connected
        try:
            answers = session.receive(message, now)
        except ProtocolError as exc:
            logger.warning("dropped a message from the router: %s", exc)
            return False
        for answer in answers:
            channel.send(answer)  # our FEATURES answer: never packed
        if not was_connected and session.connected:
            self._backoff = RECONNECT_MIN_DELAY
            self.waiting.connected()
            logger.info("jobmanager connected to %s", self.addr)
        return True

    def send(self, message: Message) -> None:
        """Send on the connected socket (dropped while not connected). To a router
        that reads bundles it goes at the end of the turn (:meth:`flush`), in order
        with everything else this turn sends."""
        channel = self.channel
        session = self.session
        if channel is None or not session.connected:
            return
        if session.send_bundle:
            self._unsent.append(encode(message))
            return
        if session.send_packed:
            channel.send_frames([pack(encode(message))])
        else:
            channel.send(message)
        assert self._liveness is not None
        self._liveness.sent(time.monotonic())

    def flush(self, *, flags: int = 0) -> None:
        """Send what :meth:`send` kept this turn: several messages as one bundle,
        one alone (packed). Called at the end of every turn and before anything
        sent straight on the socket (HEARTBEAT, KBYE), so nothing overtakes them."""
        unsent = self._unsent
        if not unsent:
            return
        self._unsent = []
        channel = self.channel
        if channel is None:
            return
        send = channel.send_frames
        start = 0
        # Cut at what the router's FEATURES said it takes: ZeroMQ drops us for more.
        # One message (the usual turn at low load) goes alone: no runs() to ask.
        cuts = (1,) if len(unsent) == 1 else runs(unsent, max_bytes=self.session.bundle_bytes)
        for taken in cuts:
            if taken > 1:
                send([bundle(unsent[start : start + taken])], flags=flags)
            elif self.session.send_packed:
                send([pack(unsent[start])], flags=flags)
            else:
                send(unsent[start], flags=flags)
            start += taken
        assert self._liveness is not None
        self._liveness.sent(time.monotonic())

    def close(self) -> None:
        """Close the connection for good: what was sent on it goes first (waiting up to
        :data:`CLOSE_LINGER` for a router that does not read it now)."""
        self._drop()
        context, self._context = self._context, None
        if context is not None:
            context.term()  # returns once every socket of it delivered, or its linger ran out

    def _drop(self) -> None:
        """Close the socket; ZeroMQ goes on delivering what was sent on a connection
        that was up (at most CLOSE_LINGER), in the background."""
        channel, unsent = self.channel, len(self._unsent)
        if channel is not None and unsent:
            try:
                self.flush(flags=transport.NOBLOCK)  # on the socket before it goes, as send() did
            except transport.ZMQError:
                logger.debug("could not send %d message(s) to the router", unsent)
        self._unsent = []
        self.channel = None
        # Never up: nothing of ours to deliver, only an INFORM (a router that came
        # up later would see a peer that has left).
        linger = CLOSE_LINGER if self.session.connected else 0.0
        self.session.close()
        if channel is not None:
            self._poller.unregister(channel.socket)
            channel.close(linger_ms=int(linger * 1000))

    def lose(self, now: float, why: str) -> None:
        """Drop the socket and plan a reconnect with back-off (to the next address, if several)."""
        lost = self.addr
        nxt = self.addresses.advance()
        several = self.addresses.several
        if self.heard_any:
            then = f"trying {nxt}" if several else "reconnecting"
            logger.warning("lost the router at %s: %s; %s", lost, why, then)
            self._backoff = RECONNECT_MIN_DELAY
            self.waiting.lost(now)
        else:
            then = f"trying {nxt}" if several else "retrying"
            logger.debug("no answer from the router at %s: %s; %s", lost, why, then)
            self.waiting.no_answer(now)
        self._drop()
        self._reconnect_at = now + self._backoff
        self._backoff = min(self._backoff * 2, self.settings.reconnect_max_delay)

    def keepalive(self, now: float) -> bool:
        """Heartbeat, notice a silent router, reconnect when it is time.

        Returns True when a new socket was made (the caller resets its state).
        """
        if self.channel is None:
            if self._reconnect_at is not None and now >= self._reconnect_at:
                self.connect(now)
                return True
            return False
        self.flush()
        liveness = self._liveness
        assert liveness is not None
        if liveness.expired(now):
            self.heartbeats_missed += self.heard_any
            self.lose(now, f"silent for more than {self.settings.heartbeat_timeout}s")
        elif self.addresses.several and not self.session.connected and now >= self._answer_by:
            self.lose(now, f"no ACK of our INFORM within {self._handshake_wait():g}s")
        elif self.addresses.several and now >= self._next_peer_check and (why := self._gone(now)):
            self.lose(now, why)
        elif liveness.due(now):
            try:
                # Never blocking: a DEALER whose only connection failed its
                # handshake (the router refused our CURVE key) has no pipe, and a
                # blocking send would hang the job manager for good, deaf to
                # SIGTERM. Unsent, the router's silence makes us reconnect.
                self.channel.send(
                    Heartbeat(msgid=new_msgid(), timestamp=time.time()), flags=transport.NOBLOCK
                )
            except transport.Again:
                logger.debug("heartbeat not sent: no connection to the router at %s", self.addr)
            liveness.sent(now)
        return False

    def _handshake_wait(self) -> float:
        return self.addresses.handshake_wait(self.settings.heartbeat_timeout)

    def _gone(self, now: float) -> str:
        """Why the current address cannot be reached ("": it can, as far as we know)."""
        self._next_peer_check = now + PEER_CHECK_EVERY
        return self.channel.unreachable() if self.channel is not None else ""

    def goodbye(self) -> None:
        """KBYE (the spelling the reference router forgets a worker on), if we can."""
        if self.channel is None:
            return
        try:
            self.flush(flags=transport.NOBLOCK)
            self.channel.send(Kbai(msgid=new_msgid(), kbye=True), flags=transport.NOBLOCK)
        except transport.ZMQError:
            logger.debug("could not send KBYE to the router")
