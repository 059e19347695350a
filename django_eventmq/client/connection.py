"""A client's connection to a router: one DEALER socket, used by one thread at a time.

Which thread uses which client, and keeping a client open when its thread
ends: :mod:`.pool`. Sending never
waits for the job to run; it waits at most ``SEND_TIMEOUT`` for the socket
to take the message, and for a ``guarantee`` job until the router ACKs it.

A job is never kept for a router that is not there: the socket queues only
toward a connected router (``IMMEDIATE``), so with none connected within
``SEND_TIMEOUT`` a send raises :class:`BrokerUnavailable` instead of
returning a msgid for a job that would go nowhere. What was handed over is
still in this process's queue until ZeroMQ writes it out; at exit the
process waits up to ``SEND_TIMEOUT`` for that, and logs once if it could not
(see :mod:`.exit`).

``BROKER_ADDR`` may list the members of a router group
(``"tcp://a:47291,tcp://b:47291"``): the socket connects to every one, and
``IMMEDIATE`` sends only over a completed connection, so jobs go to the
leader (the one member that binds) and none waits for a standby
(tests/system/ha/test_addresses_live.py shows that nothing reaches a router
that starts later at a listed address).

``BROKER_ADDR`` naming several groups (``"a,b;c,d"``: shards, each with its
own leader and journal) gives a :class:`~.shards.ShardedClient` instead: one
:class:`Client` per group, each job sent to one group (:mod:`.shards`).

What the router sends back (ACKs, partial replies, job outcomes,
rejections) arrives on the same socket, interleaved between jobs: the
client's :class:`~.inbox.Inbox` files and waits for it; the FEATURES
exchange is its :class:`~.handshake.Handshake`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from django_eventmq.client import bulk
from django_eventmq.client import exit as client_exit
from django_eventmq.client.handshake import Handshake
from django_eventmq.client.inbox import Inbox, Outcome, locked
from django_eventmq.errors import BrokerUnavailable, JobNotUnique, JobRejected
from django_eventmq.protocol import (
    EMPTY_HEADERS,
    Cancel,
    Headers,
    Message,
    Request,
    Schedule,
    Unschedule,
    new_msgid,
)
from django_eventmq.protocol.constants import HEARTBEAT_INTERVAL, HEARTBEAT_TIMEOUT
from django_eventmq.protocol.frame_fields import request_frames
from django_eventmq.protocol.packed import pack_request
from django_eventmq.protocol.unique import holder_of
from django_eventmq.runtime import security, transport
from django_eventmq.runtime.addresses import (
    parse_addresses,
)
from django_eventmq.runtime.settings import Settings

logger = logging.getLogger("django_eventmq.client")

#: Messages a client may queue in its socket before ``.delay()`` blocks. A full
#: socket takes sends again only once ZeroMQ has passed on half of it (its low
#: water mark), so one blocked send lasts as long as the router takes to read
#: CLIENT_SNDHWM / 2 of our messages: at 100,000 that was 1.5 s on a quiet
#: machine and over SEND_TIMEOUT on a loaded one (BrokerUnavailable). At 10,000
#: a sender faster than the router waits ~0.1 s every 5,000 jobs instead.
CLIENT_SNDHWM = 10_000
#: Sends between two reads of what the router sent us (ACKs we don't wait for).
DRAIN_EVERY = 256


class Client:
    """A connection to a router's frontend: a DEALER, its FEATURES handshake
    (:class:`~.handshake.Handshake`) and what it reads back (:class:`~.inbox.Inbox`)."""

    def __init__(
        self,
        addr: str,
        *,
        send_timeout: float = 5.0,
        options: Mapping[int, Any] | None = None,
        watch_peer: bool = False,
    ) -> None:
        """Connect to ``addr`` (one address, or several separated by commas: every
        member of a router group); ``options`` are extra socket options (CURVE keys,
        from :func:`~.security.secure_channel_options`; ZMTP heartbeats, by default
        every ``HEARTBEAT_INTERVAL``, see :func:`~.transport.heartbeat_options`).
        ``watch_peer``: the channel
        knows whether a router is connected (a client of several groups,
        :mod:`.shards`, skips a group without one)."""
        self.addr = addr
        self.pid = os.getpid()
        self._sends = 0
        #: The thread that uses the socket (the exit flush closes no other's).
        self.thread = threading.current_thread()
        #: Held while the socket is used (see :class:`~.inbox.Inbox`).
        self.lock = threading.RLock()
        # Unlike other sockets, a client's lingers: what it queued before an
        # explicit close still goes out, bounded by SEND_TIMEOUT, in ZeroMQ's I/O
        # thread. (A thread that ends does not close its client: pool._ThreadClients.)
        self.send_timeout = send_timeout
        self.linger_ms = int(send_timeout * 1000)
        self._curve = transport.CURVE_SERVERKEY in (options or {})
        self.channel = transport.Channel(
            transport.DEALER,
            connect=parse_addresses(addr, "BROKER_ADDR"),
            hwm=CLIENT_SNDHWM,
            options={
                transport.SNDTIMEO: int(send_timeout * 1000),
                transport.LINGER: self.linger_ms,
                # No router connected: a send waits up to SNDTIMEO for one, then
                # fails (BrokerUnavailable), rather than queueing a job that a
                # short script would take with it when it exits.
                transport.IMMEDIATE: 1,
                # A router that stopped answering (half-open connection) counts as
                # not connected after HEARTBEAT_TIMEOUT, as IMMEDIATE needs.
                **transport.heartbeat_options(HEARTBEAT_INTERVAL, HEARTBEAT_TIMEOUT),
                **(options or {}),
            },
            ctx=client_exit.context(),
            watch_peer=watch_peer,
        )
        #: The FEATURES handshake: what the router answered (packed, batch), and
        #: whether it sent anything else first (then it is the reference).
        self.handshake = Handshake(self.channel, wait=send_timeout)
        self.session = self.handshake.session  # read per job (send_packed)
        self.inbox = Inbox(self.channel, self.handshake, self.lock, addr=addr)
        client_exit.opened(self)
        self.ask_features()

    @property
    def router_features(self) -> dict[str, Any] | None:
        """The router's FEATURES once it answered ours (None: not yet, or a reference
        router). A packed REQUEST needs ``"packed"``; send_many batches with ``"batch"``."""
        return self.session.router_features

    def ask_features(self, *, wait: bool = False) -> None:
        """Say what we speak. Without ``wait``: at once, REQUESTs going plain until the
        answer comes (read with the ACKs; a reference router ignores it), and with no
        router connected before the next send. With ``wait``: still first, before
        any job, waiting up to ``SEND_TIMEOUT`` for a router to take it."""
        if not wait:
            self.handshake.ask()
            return
        try:
            self.handshake.ask_waiting()
        except transport.Again:
            raise self._unavailable() from None

    def _unavailable(self) -> BrokerUnavailable:
        """The error of a send the socket did not take within ``SEND_TIMEOUT``."""
        # A router that refuses our CURVE handshake (or our plain one) is never connected.
        keys = (
            " and our CURVE_CLIENT_SECRET_KEY's public key in its CURVE_FRONTEND_CLIENTS"
            if self._curve
            else " and does it not require CURVE keys"
        )
        return BrokerUnavailable(
            f"no router at {self.addr} took the message within SEND_TIMEOUT="
            f"{self.linger_ms / 1000:g}s: none is connected, or it is not taking messages "
            f"(is emq_router running, BROKER_ADDR right{keys}?); nothing was queued"
        )

    @locked
    def send(self, message: Message) -> str:
        """Send ``message``; returns its msgid.

        Raises :class:`BrokerUnavailable` when no router took it within ``SEND_TIMEOUT``.
        """
        if self.handshake.unsent:
            self.ask_features(wait=True)
        try:
            self.channel.send(message)
        except transport.Again:
            raise self._unavailable() from None
        self.inbox.drain()
        return message.msgid

    def send_request_frames(self, msgid: bytes, queue: bytes, headers: bytes, body: bytes) -> None:
        """Send a REQUEST from already-encoded fields (the ``.delay()`` fast path)."""
        with self.lock:  # inline, not @locked: one call less on the hot path
            if self.handshake.unsent:
                self.ask_features(wait=True)
            try:
                if self.session.send_packed:
                    self.channel.send_frames([pack_request(msgid, queue, headers, body)])
                else:
                    self.channel.send_frames(request_frames(msgid, queue, headers, body))
            except transport.Again:
                raise self._unavailable() from None
            self._sends += 1
            # Until the router's FEATURES answer is in, look for it after every send.
            if self._sends % DRAIN_EVERY == 0 or self.session.router_features is None:
                self.inbox.drain()

    @locked
    def send_request_guaranteed(
        self,
        msgid: bytes,
        queue: bytes,
        headers: bytes,
        body: bytes,
        *,
        ack_timeout: float,
        retries: int,
    ) -> None:
        """Send a REQUEST and wait for the router's ACK, resending it (same msgid).

        Raises :class:`BrokerUnavailable` when ``1 + retries`` sends got no ACK
        within ``ack_timeout`` seconds each, or no router was connected within
        ``SEND_TIMEOUT`` for the next one (saying, after a first send, that the
        job may be stored). The router treats the msgid as the
        idempotency key, so a resend of a job it already stored is harmless.
        """
        key = msgid.decode()
        inbox = self.inbox
        inbox.expect_ack(key)
        sends = 0
        refused_copy = ""  # the reason a copy was refused, when later ones were sent
        try:
            for _attempt in range(retries + 1):
                try:
                    self.send_request_frames(msgid, queue, headers, body)
                except BrokerUnavailable:
                    if not sends:
                        raise  # nothing went out: nothing can be stored
                    break  # the router went away: what it took before may be stored
                sends += 1
                deadline = time.monotonic() + ack_timeout
                refusal = None
                while not inbox.acked_now(key):
                    reason = inbox.take_refusal(key)
                    if reason is not None:
                        # After a resend a REJECT may answer an earlier copy while a
                        # later one is stored: final only for the one copy sent, or
                        # for a unique job (another job holds its key).
                        if sends == 1 or holder_of(reason):
                            refusal = reason
                            break
                        refused_copy = reason
                    left = deadline - time.monotonic()
                    if left <= 0 or not self.channel.poll(max(1, int(left * 1000))):
                        break
                    inbox.receive_one()
                if inbox.acked_now(key):
                    return
                if refusal is not None:  # not stored; sent again, it would be refused again
                    holder = holder_of(refusal)
                    if holder:
                        raise JobNotUnique(refusal, msgid=key, holder=holder)
                    raise JobRejected(refusal, msgid=key)
                logger.warning(
                    "no ACK from the router at %s for msgid=%s within %ss; sending again",
                    self.addr,
                    key,
                    ack_timeout,
                )
        finally:
            inbox.forget_ack(key)
        # Maybe not the router that answered our FEATURES: plain REQUESTs until
        # whoever serves the address now answers again.
        self.ask_features()
        refused = f"; a copy was refused: {refused_copy}" if refused_copy else ""
        unacknowledged = BrokerUnavailable(
            f"the router at {self.addr} did not acknowledge job {key} after {sends} "
            "send(s) (is emq_router running? does its log say its journal cannot be "
            f"written?{refused}); it may be stored: sending it again with "
            "the same msgid is safe"
        )
        unacknowledged.msgid = key
        raise unacknowledged

    @locked
    def send_many(
        self,
        requests: Iterable[Request | tuple[bytes, bytes, bytes, bytes]],
        *,
        guarantee: bool = True,
        window: int = bulk.CLIENT_WINDOW,
        ack_timeout: float = 2.0,
        give_up: float = bulk.DEFAULT_GIVE_UP,
        batch: int = bulk.DEFAULT_BATCH,
    ) -> bulk.SendResult:
        """Send many REQUESTs (messages, or encoded ``(msgid, queue, headers, body)``).

        With ``guarantee`` it returns once the router answered each one, with
        up to ``window`` unacknowledged at a time; one not acknowledged within
        ``ack_timeout`` seconds is sent again with the same msgid. REQUESTs
        the router refused are in the result's ``rejected`` (msgid: reason).
        Raises :class:`BrokerUnavailable` when no router is connected within
        ``SEND_TIMEOUT``, or the router answered nothing for ``give_up``
        seconds. A router of ours gets them in BATCH messages of up
        to ``batch`` jobs (0: REQUESTs only; see :mod:`.bulk`). Without
        ``guarantee`` it sends as ``.delay()`` does and waits for nothing.
        """
        encoded = bulk.encode_requests(requests)
        result = bulk.SendResult()
        if not guarantee:
            for msgid, queue, headers, body in encoded:
                self.send_request_frames(msgid, queue, headers, body)
                result.counts.setdefault(queue.decode(), bulk.QueueCounts()).sent += 1
            return result
        sender = bulk.Pipeline(
            self.channel,
            addr=self.addr,
            window=window,
            ack_timeout=ack_timeout,
            give_up=give_up,
            batch=batch,
            handshake=self.handshake,  # an answer it reads is the client's too
            on_other=self.inbox.file,  # outcomes for handles are kept as usual
            on_reject=result.reject,
            send_timeout=self.send_timeout,
        )
        if self.handshake.unsent:
            # Waits for the router's connection (as .delay() does), so that our
            # FEATURES go first and batching can start at its answer.
            self.ask_features(wait=True)
        result.counts = sender.counts
        try:
            sender.send_requests(encoded)
            sender.flush()
        except BrokerUnavailable:
            # Maybe not the router that answered our FEATURES: ask again.
            self.ask_features()
            raise
        result.batches = sender.batches_sent
        return result

    def cancel(self, job_msgid: str) -> str:
        """Ask the router to cancel ``job_msgid``; returns the CANCEL's msgid."""
        return self.send(Cancel(msgid=new_msgid(), job_msgid=job_msgid))

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

    # -- reading back (the inbox's, for callers that hold a client) ----------------
    def outcome(self, job_msgid: str, timeout: float | None) -> Outcome | None:
        """:meth:`.Inbox.outcome`: the REPLY or REJECT for ``job_msgid``, waiting."""
        return self.inbox.outcome(job_msgid, timeout)

    def outcome_now(self, job_msgid: str) -> Outcome | None:
        """:meth:`.Inbox.outcome_now`: the outcome if it is here now, from any thread."""
        return self.inbox.outcome_now(job_msgid)

    def seen(self, job_msgid: str) -> Outcome | None:
        """:meth:`.Inbox.seen`: the outcome a handle already read."""
        return self.inbox.seen(job_msgid)

    def next_part(self, job_msgid: str, timeout: float | None) -> tuple[bool, Any] | None:
        """:meth:`.Inbox.next_part`: the next partial or the outcome of ``job_msgid``."""
        return self.inbox.next_part(job_msgid, timeout)

    def drain(self) -> int:
        """:meth:`.Inbox.drain`: read what came without waiting; how many messages."""
        return self.inbox.drain()

    def confirm_read(self, deadline: float) -> bool | None:
        """:meth:`.Inbox.confirm_read`: wait until the router read all we sent."""
        return self.inbox.confirm_read(deadline)

    @property
    def closed(self) -> bool:
        return bool(self.channel.socket.closed)

    def take_over(self) -> None:
        """Used from now on by the calling thread (the one that used it ended)."""
        self.thread = threading.current_thread()

    def close(self) -> None:
        """Close the socket; jobs still queued go out within ``SEND_TIMEOUT``.

        Not under :attr:`lock`: a thread waiting with no timeout holds it, and a
        close at exit must not wait for that."""
        self.channel.close(self.linger_ms)


def client_options(settings: Settings) -> dict[int, Any]:
    """Socket options of a client of the router's frontend as ``settings`` say:
    CURVE keys, and heartbeats every ``HEARTBEAT_INTERVAL`` (dead after
    ``HEARTBEAT_TIMEOUT``)."""
    return {
        **transport.heartbeat_options(settings.heartbeat_interval, settings.heartbeat_timeout),
        **security.secure_channel_options(settings, security.FRONTEND, security.CLIENT),
    }
