"""Sending jobs to a router: one DEALER socket per process and thread.

The socket is made on first use in the calling thread and remade after a
fork (pre-fork web servers import the app, then fork workers). When the
thread ends, its socket is not closed but kept open, idle, for the next
thread that needs one: closing it would lose jobs the router has not read
yet (see :class:`_ThreadClients`). Sending never
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
rejections) arrives on the same socket, interleaved between jobs; the client
files it by job msgid so that each
:class:`~django_eventmq.client.handles.JobHandle` finds its own partials, in
order, and then its outcome. Reading and waiting for them: :mod:`.inbox`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from django_eventmq.client import bulk as pipeline
from django_eventmq.client import exit as client_exit
from django_eventmq.client.inbox import Inbox, locked
from django_eventmq.client.shards import ShardedClient
from django_eventmq.errors import BrokerUnavailable, JobNotUnique, JobRejected, ProtocolError
from django_eventmq.protocol import (
    EMPTY_HEADERS,
    Ack,
    Cancel,
    Headers,
    Message,
    Partial,
    Reject,
    Reply,
    Request,
    Schedule,
    Unschedule,
    decode,
    encode,
    new_msgid,
)
from django_eventmq.protocol.bundle import is_bundle, unbundle
from django_eventmq.protocol.codec import reply_of
from django_eventmq.protocol.constants import HEARTBEAT_INTERVAL, HEARTBEAT_TIMEOUT
from django_eventmq.protocol.packed import pack_request
from django_eventmq.protocol.session import ClientSession
from django_eventmq.protocol.unique import holder_of
from django_eventmq.protocol.views import is_ack, request_frames
from django_eventmq.runtime import config, security, transport
from django_eventmq.runtime.addresses import (
    SHARD_BY_QUEUE,
    check_shard_by,
    parse_addresses,
    parse_groups,
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
#: Outcomes (REPLY/REJECT) kept for handles that have not waited yet; the
#: oldest are dropped beyond this, so un-awaited replies cannot grow memory.
MAX_KEPT_OUTCOMES = 10_000
#: Unread partials kept per job (the oldest are dropped beyond this), and jobs
#: with unread partials (the job with the oldest is dropped beyond this).
MAX_KEPT_PARTIALS = 1_000
MAX_PARTIAL_JOBS = 10_000
#: Outcomes already read, kept so that the same handle's next ``.wait()`` or
#: ``.stream()`` has it at once (the most recent ones).
MAX_SETTLED_OUTCOMES = 1_000

#: What a handle may receive for its job: a REPLY (the outcome) or a REJECT.
Outcome = Reply | Reject


class Client(Inbox):
    """A connection to a router's frontend."""

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
        #: Outcomes by job msgid, oldest first (dicts keep insertion order).
        self._outcomes: dict[str, Outcome] = {}
        #: Unread partial values by job msgid, oldest job first.
        self._partials: dict[str, deque[Any]] = {}
        #: Outcomes already read by a handle, most recent last.
        self._settled: dict[str, Outcome] = {}
        #: msgids of guarantee jobs sent and not yet acknowledged.
        self._awaiting_ack: set[str] = set()
        self._acked: set[str] = set()
        #: REJECT reasons of awaited guarantee jobs (raised by their send).
        self._refused: dict[str, str] = {}
        #: The FEATURES handshake: what the router answered (packed, batch), and
        #: whether it sent anything else first (then it is the reference).
        self.session = ClientSession(pipeline.CLIENT_FEATURES)
        #: Our FEATURES could not go yet (no router connected): sent before the next send.
        self._features_unsent = False
        #: The thread that uses the socket (the exit flush closes no other's).
        self.thread = threading.current_thread()
        self.lock = threading.RLock()  # see Inbox.lock
        # Unlike other sockets, a client's lingers: what it queued before an
        # explicit close still goes out, bounded by SEND_TIMEOUT, in ZeroMQ's I/O
        # thread. (A thread that ends does not close its client: _ThreadClients.)
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
        # Bundles of ACKs to us are cut at the largest frame our socket takes.
        self.session.our_features = pipeline.client_features(self.channel)
        client_exit.opened(self)
        self._ask_features()

    @property
    def router_features(self) -> dict[str, Any] | None:
        """The router's FEATURES once it answered ours (None: not yet, or a reference
        router). A packed REQUEST needs ``"packed"``; send_many batches with ``"batch"``."""
        return self.session.router_features

    def _ask(self) -> list[bytes]:
        """Our FEATURES; an answer (a router of ours) is due within ``SEND_TIMEOUT``."""
        return encode(self.session.ask(time.monotonic(), wait=self.linger_ms / 1000))

    def _ask_features(self) -> None:
        """Say what we speak, without waiting: REQUESTs go plain until the answer
        comes (read with the ACKs); a reference router ignores it."""
        self._features_unsent = not self._try_send(self._ask())

    def _send_features(self) -> None:
        """Send the FEATURES that found no router connected (still first, before
        any job), waiting up to ``SEND_TIMEOUT`` for one."""
        try:
            self.channel.send_frames(self._ask())
        except transport.Again:
            raise self._unavailable() from None
        self._features_unsent = False

    def _try_send(self, frames: list[bytes]) -> bool:
        """Send without waiting; False if the socket would not take it now."""
        try:
            self.channel.send_frames(frames, flags=transport.NOBLOCK)
        except transport.Again:
            return False
        return True

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
        if self._features_unsent:
            self._send_features()
        try:
            self.channel.send(message)
        except transport.Again:
            raise self._unavailable() from None
        self.drain()
        return message.msgid

    def send_request_frames(self, msgid: bytes, queue: bytes, headers: bytes, body: bytes) -> None:
        """Send a REQUEST from already-encoded fields (the ``.delay()`` fast path)."""
        with self.lock:  # inline, not @locked: one call less on the hot path
            if self._features_unsent:
                self._send_features()
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
                self.drain()

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
        self._awaiting_ack.add(key)
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
                while key not in self._acked:
                    if key in self._refused:
                        reason = self._refused.pop(key)
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
                    self._receive_one()
                if key in self._acked:
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
            self._awaiting_ack.discard(key)
            self._acked.discard(key)
            self._refused.pop(key, None)
        # Maybe not the router that answered our FEATURES: plain REQUESTs until
        # whoever serves the address now answers again.
        self._ask_features()
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
        window: int = pipeline.CLIENT_WINDOW,
        ack_timeout: float = 2.0,
        give_up: float = pipeline.DEFAULT_GIVE_UP,
        batch: int = pipeline.DEFAULT_BATCH,
    ) -> pipeline.SendResult:
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
        encoded = pipeline.encode_requests(requests)
        result = pipeline.SendResult()
        if not guarantee:
            for msgid, queue, headers, body in encoded:
                self.send_request_frames(msgid, queue, headers, body)
                result.counts.setdefault(queue.decode(), pipeline.QueueCounts()).sent += 1
            return result
        sender = pipeline.Pipeline(
            self.channel,
            addr=self.addr,
            window=window,
            ack_timeout=ack_timeout,
            give_up=give_up,
            batch=batch,
            router_features=self.router_features,
            on_other=self._file,  # outcomes for handles are kept as usual
            on_reject=result.reject,
            send_timeout=self.send_timeout,
        )
        if self._features_unsent:
            # Waits for the router's connection (as .delay() does), so that our
            # FEATURES go first and batching can start at its answer.
            self._send_features()
        result.counts = sender.counts
        try:
            sender.send_requests(encoded)
            sender.flush()
        except BrokerUnavailable:
            # Maybe not the router that answered our FEATURES: ask again.
            self._ask_features()
            raise
        if sender.router_features is not None:
            self.session.answered(sender.router_features)  # it read the answer on our socket
        result.batches = sender.batches_sent
        return result

    def cancel(self, job_msgid: str) -> str:
        """Ask the router to cancel ``job_msgid``; returns the CANCEL's msgid."""
        return self.send(Cancel(msgid=new_msgid(), job_msgid=job_msgid))

    # -- receiving (filing; reading and waiting: Inbox) ----------------------
    def _settle(self, job_msgid: str, outcome: Outcome) -> Outcome:
        """``outcome`` was read: keep it for the handle's next look, drop unread partials."""
        self._partials.pop(job_msgid, None)
        settled = self._settled
        settled[job_msgid] = outcome
        if len(settled) > MAX_SETTLED_OUTCOMES:
            # Another thread may settle at once (outcome_now takes no lock to).
            with contextlib.suppress(StopIteration, KeyError, RuntimeError):
                del settled[next(iter(settled))]
        return outcome

    def _file(self, frames: list[bytes], *, inner: bool = False) -> None:
        """File one message from the router by msgid (``inner``: one of a bundle's)."""
        # The common case, an ACK of a job nobody waits on, is skipped undecoded
        # (packed, as the router ACKs a packed REQUEST, or not).
        if not self._awaiting_ack and is_ack(frames):
            self.session.heard()
            return
        if len(frames) == 1 and is_bundle(frames[0]) and not inner:
            # The ACKs one commit released (protocol/bundle.py): each as if alone.
            try:
                messages = unbundle(frames[0])
            except ProtocolError as exc:
                self.session.heard()
                logger.warning(
                    "ignored a malformed bundle from the router at %s: %s", self.addr, exc
                )
                return
            for message_frames in messages:
                # A bundle in a bundle is no eMQP message: decode refuses it below.
                self._file(message_frames, inner=True)
            return
        # A job's outcome (what .wait() waits for) straight to its Reply; the rest decoded.
        message: Message | None = reply_of(frames)
        if message is None:
            try:
                message = decode(frames)
            except ProtocolError as exc:
                self.session.heard()
                logger.warning(
                    "ignored a malformed message from the router at %s: %s", self.addr, exc
                )
                return
        self.session.receive(message)
        if isinstance(message, Ack):
            if message.ack_msgid in self._awaiting_ack:
                self._acked.add(message.ack_msgid)
        elif isinstance(message, Reply):
            if message.reply_to is None:
                # The reference router's receipt for a forwarded REQUEST:
                # REPLY whose payload is the job's msgid. As good as an ACK.
                if message.payload in self._awaiting_ack:
                    self._acked.add(message.payload)
            else:
                self._keep(message.reply_to, message)
        elif isinstance(message, Partial):
            self._keep_partial(message)
        elif isinstance(message, Reject):
            logger.info("router rejected msgid=%s: %s", message.job_msgid, message.reason)
            if message.job_msgid in self._awaiting_ack:
                self._refused[message.job_msgid] = message.reason  # its send raises
            else:
                self._keep(message.job_msgid, message)
        # FEATURES (the answer to ours, or to a send_many's after it returned): the
        # session has it. HEARTBEAT, DISCONNECT and others need nothing from a client.

    def _keep(self, job_msgid: str, message: Outcome) -> None:
        outcomes = self._outcomes
        outcomes[job_msgid] = message
        if len(outcomes) > MAX_KEPT_OUTCOMES:
            oldest = next(iter(outcomes))
            del outcomes[oldest]
            logger.warning(
                "dropped the unclaimed outcome of msgid=%s (more than %d kept)",
                oldest,
                MAX_KEPT_OUTCOMES,
            )

    def _keep_partial(self, message: Partial) -> None:
        partials = self._partials
        queued = partials.get(message.job_msgid)
        if queued is None:
            queued = partials[message.job_msgid] = deque(maxlen=MAX_KEPT_PARTIALS)
            if len(partials) > MAX_PARTIAL_JOBS:
                oldest = next(iter(partials))
                del partials[oldest]
                logger.debug("dropped the unread partials of msgid=%s", oldest)
        queued.append(message.value)

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


_local = threading.local()
#: This process's pid (``os.getpid()`` is a system call; every ``.delay()`` and
#: ``.wait()`` looks), made again in a forked child, as the msgid prefix is.
_pid = os.getpid()
#: Clients of threads that ended, still open, by address: the next thread that
#: needs a client for that address takes one (at most as many as threads ran
#: at once). Guarded by ``_idle_lock``, which is also the memory barrier ZeroMQ
#: asks for when a socket moves to another thread.
_idle: dict[str, list[Client | ShardedClient]] = {}
_idle_lock = threading.Lock()


#: Most senders remembered (:func:`remember_sender`), the oldest forgotten first.
MAX_SENDERS = 100_000
#: The client that sent each job whose outcome may be waited for, by msgid: the
#: router answers the socket that sent it, and ``.wait()`` may come from any thread.
_senders: dict[str, Client | ShardedClient] = {}


def remember_sender(msgid: str, client: Client | ShardedClient) -> None:
    """``client`` sent job ``msgid``, whose outcome will come to its socket."""
    senders = _senders
    senders[msgid] = client
    if len(senders) > MAX_SENDERS:
        with contextlib.suppress(StopIteration, KeyError, RuntimeError):  # another thread's
            del senders[next(iter(senders))]


def sender_of(msgid: str) -> Client | ShardedClient | None:
    """The open client of this process that sent job ``msgid``, if it is remembered."""
    client = _senders.get(msgid)
    return None if client is None or client.closed else client


def _forked() -> None:
    global _pid, _idle, _idle_lock
    _pid = os.getpid()
    _senders.clear()  # the parent's sockets
    # The parent's sockets: never used here, only forgotten (pyzmq closes
    # nothing it made in another process). The lock may have been held by
    # another of the parent's threads, which the child does not have.
    _idle, _idle_lock = {}, threading.Lock()


os.register_at_fork(after_in_child=_forked)


class _ThreadClients(dict[str, "Client | ShardedClient"]):
    """One thread's clients by address, held by its thread-local.

    When the thread ends, the thread-local goes and so does this: its clients
    go to :data:`_idle`, open. Closing them instead lost jobs: a socket closed
    with ZeroMQ's linger writes its queue out to the kernel, but the router
    is still reading its backlog and ACKing it, the ACKs meet a closed socket,
    the kernel answers with a reset, and the reset throws away every job still
    in the router's receive buffer (4 threads sending 2,500 each and ending:
    over half lost, nothing logged). Kept open, the connection carries every
    job to the router while the process lives; at exit the flush
    (:mod:`.exit`) waits until the router has read them.
    """

    __slots__ = ("pid",)

    def __init__(self, pid: int) -> None:
        super().__init__()
        self.pid = pid

    def __del__(self) -> None:
        # Runs in the ending thread. Not in a forked child (the parent's sockets).
        if self.pid != _pid or not self:
            return
        with _idle_lock:
            for addr, client in self.items():
                _idle.setdefault(addr, []).append(client)


def _idle_client(addr: str) -> Client | ShardedClient | None:
    """An open client for ``addr`` left by a thread that ended, now this thread's."""
    with _idle_lock:
        idle = _idle.get(addr)
        while idle:
            client = idle.pop()
            if not client.closed:
                client.take_over()
                return client
    return None


def get_client(addr: str, *, send_timeout: float = 5.0) -> Client | ShardedClient:
    """This thread's client for ``addr`` (a new one after fork).

    ``addr`` naming several router groups (``"a,b;c,d"``) gives a
    :class:`~.shards.ShardedClient`, one :class:`Client` per group. Its
    sockets speak CURVE as the current settings say (the router's frontend
    role), so every client of this process uses the same key pair.
    """
    clients: _ThreadClients | None = getattr(_local, "clients", None)
    pid = _pid
    if clients is None or clients.pid != pid:
        # After fork the inherited sockets belong to the parent: never use
        # or close them here, just forget them.
        clients = _local.clients = _ThreadClients(pid)
    client = clients.get(addr)
    if client is None:
        client = _idle_client(addr)
        if client is None:
            settings = config.get_settings()
            client = connect(
                addr,
                send_timeout=send_timeout,
                options=client_options(settings),
                shard_by=settings.shard_by,
            )
        clients[addr] = client
    return client


def client_options(settings: Settings) -> dict[int, Any]:
    """Socket options of a client of the router's frontend as ``settings`` say:
    CURVE keys, and heartbeats every ``HEARTBEAT_INTERVAL`` (dead after
    ``HEARTBEAT_TIMEOUT``)."""
    return {
        **transport.heartbeat_options(settings.heartbeat_interval, settings.heartbeat_timeout),
        **security.secure_channel_options(settings, security.FRONTEND, security.CLIENT),
    }


def connect(
    addr: str,
    *,
    send_timeout: float = 5.0,
    options: Mapping[int, Any] | None = None,
    shard_by: str = SHARD_BY_QUEUE,
) -> Client | ShardedClient:
    """A new client for ``addr``: a :class:`Client` for one router group, a
    :class:`~.shards.ShardedClient` (a Client per group, jobs spread as
    ``shard_by`` says) for several (``"a,b;c,d"``)."""
    groups = parse_groups(addr, "BROKER_ADDR")
    if len(groups) == 1:
        return Client(addr, send_timeout=send_timeout, options=options)
    members = [
        Client(",".join(group), send_timeout=send_timeout, options=options, watch_peer=True)
        for group in groups
    ]
    return ShardedClient(
        addr,
        members,
        send_timeout=send_timeout,
        shard_by=check_shard_by(shard_by),
    )


def existing_client(addr: str) -> Client | ShardedClient | None:
    """This thread's client for ``addr`` if it has one (none is made)."""
    clients: _ThreadClients | None = getattr(_local, "clients", None)
    if clients is None or clients.pid != _pid:
        return None
    return clients.get(addr)


def close_clients() -> None:
    """Close this thread's client sockets and those threads that ended left
    (tests, shutdown)."""
    clients: _ThreadClients | None = getattr(_local, "clients", None)
    _local.clients = _ThreadClients(_pid)
    closing: list[Client | ShardedClient] = []
    if clients is not None and clients.pid == _pid:
        closing.extend(clients.values())
        clients.clear()  # closed below: nothing to leave for another thread
    with _idle_lock:
        for idle in _idle.values():
            closing.extend(idle)
        _idle.clear()
    for client in closing:
        client.close()
