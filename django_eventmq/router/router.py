"""The router (broker): clients and schedulers on the frontend, job managers on
the backend, administration on a third socket.

The router forwards raw frames and never parses job bodies; a job's life
(stored, handed out, finished, handed out again) lives in :mod:`.book`,
routing decisions in :mod:`.routing`, the store in :mod:`.journal`.

One loop iteration: take what the sockets have, hand jobs out (sent
together at the end of the iteration, while the commit that stores them is
in flight), then commit the journal (group commit: one sync for everything
the iteration changed) and only then send the ACKs of the REQUESTs it
accepted. Sends never
block: a peer whose pipe is full or that is gone costs us one message (a
heartbeat, an ACK the client will ask for again) or puts a REQUEST back to
the front of its queue, never the router itself.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from django_eventmq.errors import ConfigurationError, ProtocolError
from django_eventmq.protocol import (
    Ack,
    AdminRequest,
    Heartbeat,
    Kbai,
    Message,
    Reply,
    decode,
    new_msgid,
)
from django_eventmq.protocol import constants as C
from django_eventmq.protocol.frame_fields import after_identity, identity_of
from django_eventmq.protocol.limits import OverLimit
from django_eventmq.router import admin_socket as admin_json
from django_eventmq.router.backend import Backend
from django_eventmq.router.book import Book
from django_eventmq.router.commit_acks import COMMIT_INTERVAL, CommitAcks
from django_eventmq.router.frontend import DRAIN_CAP, Frontend
from django_eventmq.router.hand_outs import HandOuts
from django_eventmq.router.journal.api import JournalLike
from django_eventmq.router.journal.salvage import salvage
from django_eventmq.router.journal.store import (
    MEMORY,
    Journal,
    JournalDamaged,
    JournalUnavailable,
    resolve_path,
)
from django_eventmq.router.lease_keeper import LeasedJournal, LeaseKeeper
from django_eventmq.router.queue_marks import QueueMarks
from django_eventmq.router.routing import Routing, Schedulers
from django_eventmq.router.scheduler_relay import SchedulerRelay
from django_eventmq.router.unserved import UnservedQueues
from django_eventmq.runtime import security, transport
from django_eventmq.runtime.admin_token import AdminGate
from django_eventmq.runtime.outbox import CLIENT_SNDHWM, Handler, Outbox, WarnOnce, send, show
from django_eventmq.runtime.service import Service
from django_eventmq.runtime.settings import Settings
from django_eventmq.runtime.transport import Channel

__all__ = ["COMMIT_INTERVAL", "DRAIN_CAP", "FRONTEND_RCVHWM", "RETRY_MS", "SNDHWM", "Router"]

log = logging.getLogger("django_eventmq.router")

#: Poll timeout (ms) while a REQUEST waits to be re-sent after a full pipe.
RETRY_MS = 10
#: Messages queued per peer before a send to it fails with ``Again`` (bounds memory
#: when a client never reads its ACKs).
SNDHWM = 100_000
#: Messages read ahead from each client on the frontend (ZeroMQ's receive queue,
#: about 1 KiB each in router memory). A client that sends faster than the
#: router stores (``.delay()`` in a loop) would otherwise park up to SNDHWM of
#: them here, ~100 MiB; past this bound they wait in the client's own socket
#: (CLIENT_SNDHWM there) and in TCP buffers, and its sends slow to the router's
#: pace. tests/system/chaos/test_flood.py holds the router's peak to it.
FRONTEND_RCVHWM = 1_000


class Router(Service):
    """The eMQP/1.0 router, a runtime.service :class:`Service` (its ``run()`` installs
    SIGTERM/SIGINT in the main thread): ``run()`` in its own thread or process,
    ``stop()`` from anywhere.

    This class owns the sockets, the loop, back-pressure, the admin socket and
    the timers. Its parts, made by :meth:`start` (they need the journal), each
    own their state: :attr:`front` (:mod:`.frontend`: clients) with
    :attr:`marks` (:mod:`.queue_marks`) and :attr:`relay`
    (:mod:`.scheduler_relay`: schedulers), :attr:`back` (:mod:`.backend`: job
    managers), :attr:`hand_outs` (:mod:`.hand_outs`: jobs handed out, sent once
    stored), :attr:`commits` (:mod:`.commit_acks`: the journal's commits and
    the ACKs they release) and :attr:`book` (:mod:`.book`: every job held).
    """

    #: The bound sockets, made by :meth:`start`.
    frontend: Channel
    backend: Channel
    admin: Channel
    #: What clients are sent (ACKs, REJECTs, replies, FEATURES), counted and bounded.
    outbox: Outbox
    #: The parts, made by :meth:`start` (see the class doc).
    book: Book
    hand_outs: HandOuts
    commits: CommitAcks
    marks: QueueMarks
    relay: SchedulerRelay
    front: Frontend
    back: Backend

    label = "router"
    log = log

    def __init__(
        self,
        settings: Settings,
        *,
        journal_recover: bool = False,
        journal: Callable[[], JournalLike] | None = None,
        lease_seconds: float = 0.0,
        admin: Channel | None = None,
        admin_gate: AdminGate | None = None,
        status_extra: Callable[[], dict[str, Any]] | None = None,
        fatal: tuple[type[BaseException], ...] = (),
    ) -> None:
        """The keywords after ``journal_recover`` are for a router group's leader
        (:mod:`.group`): ``journal`` opens its journal (else the SQLite journal of
        the settings), whose lease (``lease_seconds``) is checked before anything is
        handled and renewed while idle; ``admin`` is an admin socket bound by the
        caller (used, never closed) with its token (``admin_gate``, opened and closed by
        the caller); ``status_extra`` adds to STATUS and MONITOR;
        ``fatal`` are exceptions (``LeadershipLost``) that end :meth:`loop_once`
        instead of being logged by a handler."""
        super().__init__()
        self.settings = settings
        #: Salvage a damaged journal at start (``--journal-recover``) instead of refusing it.
        self.journal_recover = journal_recover
        self._journal_factory = journal
        self._lease_seconds = lease_seconds
        #: The group leader's lease checks (None: the SQLite journal, no lease).
        self._lease: LeaseKeeper | None = None
        self._borrowed_admin = admin
        #: What state-changing admin commands must carry (see runtime.admin_token).
        self._gate = admin_gate or AdminGate(settings)
        self._own_gate = admin_gate is None
        self._status_extra = status_extra
        #: What a handler re-raises rather than logs: the loop must end (see __init__).
        self.fatal: tuple[type[BaseException], ...] = (transport.ContextTerminated, *fatal)
        self._lost_errors = fatal
        #: The journal was lost (a ``fatal`` error): close() must not commit or send.
        self.lost = False
        self.schedulers = Schedulers()
        self.frontend_address = ""
        self.backend_address = ""
        self.admin_address = ""
        self.journal_path = ""
        self._blocked = False
        self._next_tick = 0.0
        self._tick = settings.heartbeat_interval / 4
        self._warn = WarnOnce()
        self._limits = security.limits_from_settings(settings)
        # Job managers reconnecting (after a restart of either side) are not a problem.
        self._unserved = UnservedQueues(grace=2 * settings.heartbeat_timeout)
        #: The ZAP policies of our three sockets (CURVE keys, admin local-only), from start().
        self._guard: security.Guard | None = None
        self._channels: list[Channel] = []
        self._poller: transport.Poller | None = None
        self._handlers: dict[Channel, tuple[str, bool, dict[type, Handler]]] = {}

    @property
    def routing(self) -> Routing:
        return self.book.routing

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> None:
        """Bind the three sockets, open the journal and log the ready line."""
        if self._poller is not None:
            return
        s = self.settings
        try:
            # ZAP must serve the sockets' domains before they bind: without a
            # handler ZeroMQ would let any CURVE key in.
            borrowed = self._borrowed_admin
            roles = (security.FRONTEND, security.BACKEND)
            self._guard = security.Guard(s, roles if borrowed else (*roles, security.ADMIN))
            self._guard.start()
            # Past CLIENT_SNDHWM, what a client is sent waits in the outbox, counted.
            self.frontend = self._bind(
                s.frontend_addr, security.FRONTEND, sndhwm=CLIENT_SNDHWM, rcvhwm=FRONTEND_RCVHWM
            )
            # Job managers of ours may pack their messages: the backend's drain
            # unpacks them itself (a DONE read straight from its frame), as the
            # frontend's looks for packed REQUESTs (to ACK each in its own form).
            self.backend = self._bind(s.backend_addr, security.BACKEND)
            self.admin = borrowed or self._bind(s.admin_addr, security.ADMIN)
            self.frontend_address = self.frontend.address
            self.backend_address = self.backend.address
            self.admin_address = self.admin.address
            if self._own_gate:
                self._gate.open(self.admin_address)
            if self._journal_factory is not None:
                journal = self._journal_factory()
                self.journal_path = journal.path
                if self._lease_seconds > 0:
                    if not isinstance(journal, LeasedJournal):  # a bug, not a setting
                        journal.close()
                        raise TypeError(f"{type(journal).__name__} keeps no lease")
                    self._lease = LeaseKeeper(journal, self._lease_seconds)
            else:
                self.journal_path = (
                    resolve_path(s.journal_path, self.frontend_address) if s.journal else MEMORY
                )
                journal = self._open_journal()
        except BaseException as exc:
            self.lost = isinstance(exc, self._lost_errors)
            self.close()
            raise
        self._make_parts(journal)
        try:
            self.book.recover()
        except JournalUnavailable as exc:
            self.close()
            raise ConfigurationError(
                f"JOURNAL_PATH: cannot write journal {journal.path}: {exc.reason}"
            ) from None
        except BaseException as exc:
            self.lost = isinstance(exc, self._lost_errors)
            self.close()
            raise
        self.hand_outs.durable_seq = self.book.last_seq
        self.relay.recover()
        self._handlers = {
            self.frontend: ("frontend", False, self.front.handlers()),
            self.backend: ("backend", False, self.back.handlers()),
            self.admin: ("admin", True, self._admin_handlers()),
        }
        self._poller = transport.Poller(*self._channels, *([self.admin] if borrowed else []))
        log.info(
            "router ready: frontend=%s backend=%s admin=%s",
            self.frontend_address,
            self.backend_address,
            self.admin_address,
        )
        if self._journal_factory is not None:
            log.info("journal: %s", self.journal_path)
        elif s.journal:
            log.info("journal: %s (sync %s)", self.journal_path, s.journal_sync)

    def _make_parts(self, journal: JournalLike) -> None:
        """The router's parts (see the class doc), each given what it uses."""
        s = self.settings
        self.outbox = outbox = Outbox(self.frontend, s.outbox_budget, s.outbox_peer_bytes)
        self.book = book = Book(s, journal, to_client=outbox.send)
        # A group's leader hands a job out only once stored: one that lost its lease
        # at the commit must not have run it (hand_outs.py).
        self.hand_outs = hand_outs = HandOuts(self.backend, book, before_commit=self._lease is None)
        self.commits = commits = CommitAcks(
            book, self.frontend, self.backend, outbox, hand_outs, self._lease, self._is_blocked
        )
        # The book hands out and tells through the parts made from it.
        book.connect(hand_outs.deliver, commits.tell_client, commits.tell_set_aside)
        self.back = Backend(
            s, book, self.backend, self.frontend, hand_outs, commits, self._warn, self._handle
        )
        self.marks = QueueMarks(s, book, self.fatal)
        self.relay = SchedulerRelay(book, self.frontend, self.schedulers, commits, self._warn)
        self.front = Frontend(
            s,
            book,
            self.frontend,
            outbox,
            commits,
            self.marks,
            self.relay,
            self.back.send_to_worker,
            (self._warn, self._limits, self.fatal),
            self._handle,
        )

    def _is_blocked(self) -> bool:
        return self._blocked

    def _open_journal(self) -> JournalLike:
        """The journal; a damaged one is refused, or salvaged with ``journal_recover``."""
        s = self.settings
        path = self.journal_path
        try:
            return Journal(path, sync=s.journal_sync, busy_timeout=s.journal_busy_timeout)
        except JournalDamaged as exc:
            if not self.journal_recover:
                raise
            log.warning("%s", exc)
        aside, copied, unreadable = salvage(path)
        log.warning(
            "journal %s recovered: the damaged files are now %s*; copied %s; %d unreadable "
            "run(s) of rows skipped",
            path,
            aside,
            ", ".join(f"{n} {table}" for table, n in copied.items()) or "nothing",
            unreadable,
        )
        return Journal(path, sync=s.journal_sync, busy_timeout=s.journal_busy_timeout)

    def _bind(
        self,
        addr: str,
        role: str,
        *,
        sndhwm: int = SNDHWM,
        rcvhwm: int = SNDHWM,
    ) -> Channel:
        options = security.secure_channel_options(self.settings, role, security.SERVER)
        channel = Channel(
            transport.ROUTER,
            bind=addr,
            hwm=SNDHWM,
            options={**options, transport.SNDHWM: sndhwm, transport.RCVHWM: rcvhwm},
            limits=self._limits,
            bind_setting=f"{role.upper()}_ADDR",  # FRONTEND_ADDR, BACKEND_ADDR, ADMIN_ADDR
            bind_option=f"--{role}",
        )
        self._channels.append(channel)
        return channel

    def close(self) -> None:
        """Commit the journal, send what waited on it, close sockets and journal (idempotent).

        After the journal was lost (:attr:`lost`: another router leads the group)
        nothing is committed or sent: the sockets close and the memory is dropped.
        """
        book = getattr(self, "book", None)
        if book is not None and self._channels and not self.lost:
            try:
                self.commits.sync(force=True)
                self.hand_outs.flush()
            except self._lost_errors as exc:
                self.lost = True
                log.warning("journal lost while closing: %s", exc)
            except Exception:  # noqa: S110 - closing anyway; the journal said why once
                pass
        for channel in self._channels:
            channel.close()
        self._channels.clear()
        self._poller = None
        if self._guard is not None:
            self._guard.stop()
            self._guard = None
        if self._own_gate:
            self._gate.close()
        if book is not None and not book.journal.closed and self.lost:
            book.journal.close()  # never commits, never raises (a lost journal)
        elif book is not None and not book.journal.closed:
            journal = book.journal
            # Only a committed journal can tell it holds nothing.
            try:
                journal.commit()
            except self._lost_errors as exc:
                self.lost = True
                log.warning("journal lost while closing: %s", exc)
                journal.close()
                return
            empty = journal.path != MEMORY and not journal.pending and journal.is_empty()
            journal.close()
            if (
                empty
                and self._journal_factory is None
                and "{frontend}" in self.settings.journal_path
            ):
                # A per-address default journal with nothing in it: leave no litter.
                for suffix in ("", "-wal", "-shm", ".lock", ".mark"):
                    with contextlib.suppress(OSError):
                        os.unlink(journal.path + suffix)

    def loop_once(self, timeout_ms: int = 100, now: float | None = None) -> None:
        """Wait up to ``timeout_ms`` for messages, handle all that are ready, do any
        timed work that is due, then commit the journal and send the ACKs.

        A ``fatal`` error (the group's journal lost its lease) ends it at once and
        marks the router :attr:`lost`: close it without committing."""
        try:
            self._turn(timeout_ms, now)
        except self._lost_errors:
            self.lost = True
            raise

    def _turn(self, timeout_ms: int, now: float | None) -> None:
        if self._poller is None:
            self.start()
        assert self._poller is not None
        timeout_ms = min(timeout_ms, max(1, int(self._tick * 1000)))
        hand_outs = self.hand_outs
        if hand_outs.retry or self.outbox:
            timeout_ms = min(timeout_ms, RETRY_MS)
        due = self.book.next_due()
        if due is not None:
            timeout_ms = max(0, min(timeout_ms, int((due - time.time()) * 1000) + 1))
        ready = self._poller.poll(timeout_ms)
        lease = self._lease
        if lease is not None:
            lease.check()  # before anything is handled or sent (see lease_keeper)
        t = time.monotonic() if now is None else now
        for channel in ready:
            if channel is self.frontend:
                self.front.drain(t)
            elif channel is self.backend:
                self.back.drain(t)
            else:
                self._drain(channel, t)
        if hand_outs.retry:
            hand_outs.retry = False
            self.book.pump(t)
        self.book.promote_due(time.time(), t)
        self.marks.release(t)
        if t >= self._next_tick:
            self._next_tick = t + self._tick
            self._housekeeping(t)
        hand_outs.flush()
        self.outbox.flush()
        self.commits.sync(now=t)
        if lease is not None:
            lease.heartbeat()
        self._check_high_water()

    # -- back-pressure -----------------------------------------------------------------
    def _check_high_water(self) -> None:
        """Policy ``block``: stop reading clients above the mark, or while the journal
        cannot be written; start again below 90% (and once it can)."""
        if self.settings.hwm_policy != "block" or self._poller is None:
            return
        backlog = self.book.backlog()
        mark = self.settings.high_water_mark
        failure = self.book.journal.failure
        if failure is not None:
            if not self._blocked:
                self._blocked = True
                self._poller.unregister(self.frontend)
                log.warning("journal cannot be written (%s): not reading clients", failure)
            return
        if not self._blocked and backlog >= mark:
            self._blocked = True
            self._poller.unregister(self.frontend)
            log.warning(
                "high-water mark reached (%d jobs waiting): not reading clients until below %d",
                backlog,
                self._low_water(),
            )
        elif self._blocked and backlog < self._low_water():
            self._blocked = False
            self._poller.register(self.frontend)
            log.warning(
                "below the high-water mark again (%d jobs waiting): reading clients", backlog
            )

    def _low_water(self) -> int:
        mark = self.settings.high_water_mark
        return max(1, min(mark - 1, int(mark * 0.9)))

    @property
    def blocked(self) -> bool:
        """True while clients are not read (high-water mark, policy ``block``)."""
        return self._blocked

    # -- receiving -------------------------------------------------------------
    def _drain(self, channel: Channel, now: float) -> None:
        for _ in range(DRAIN_CAP):
            try:
                raw = channel.recv_frames(flags=transport.NOBLOCK)
            except transport.Again:
                return
            self._handle(channel, raw, now)

    def _handle(self, channel: Channel, raw: list[bytes], now: float) -> None:
        """Decode one message and call its handler; bad input is logged once."""
        name, admin_socket, handlers = self._handlers[channel]
        identity = identity_of(raw)
        frames = after_identity(raw)
        try:
            if len(raw) < 2:
                raise ProtocolError(f"expected an identity and a message, got {len(raw)} frame(s)")
            self._limits.check_frames(raw)
            message = decode(frames, admin=admin_socket)
            self._limits.check_message(message)
        except OverLimit as exc:
            if channel is self.frontend:
                self.front.over_limit(identity, exc)
            else:
                self._warn(name, identity, exc.reason, "dropped")
            return
        except ProtocolError as exc:
            self._warn(name, identity, exc.reason, "dropped malformed message")
            return
        handler = handlers.get(type(message))
        if handler is None:
            self._warn(name, identity, f"unexpected command {message.command or 'admin'}")
            return
        try:
            handler(identity, frames, message, now)
        except self.fatal:
            raise
        except JournalUnavailable as exc:  # said once by the journal; no ACK: it comes again
            log.debug("%s: %s from %s not stored: %s", name, message, show(identity), exc.reason)
        except Exception:
            # A bug of ours must not take the router down with it.
            log.exception("%s: error handling %s from %s", name, message, show(identity))

    # -- admin -------------------------------------------------------------------
    def _admin_handlers(self) -> dict[type, Handler]:
        return {AdminRequest: self._on_admin}

    def _on_admin(self, identity: bytes, frames: list[bytes], msg: Message, now: float) -> None:
        assert isinstance(msg, AdminRequest)
        if self._gate.turn_away(self.admin, identity, msg, self._warn):
            return
        if msg.action == C.DISCONNECT:
            self._on_admin_disconnect(identity, msg)
            return
        if msg.action == C.STATUS:
            body = admin_json.status(self.routing, now)
            body["poisoned_messages"] = admin_json.poisoned(self.book)
            body["poisoned_messages_total"] = sum(self.book.poisoned.by_queue.values())
            # Jobs dropped at hand-out because their ``expires`` time passed.
            body["expired_messages_by_queue"] = dict(self.book.expired_jobs.by_queue)
            body.update(self.book.stats.as_dict())
            body["journal_failure"] = self.book.journal.failure
            if self._status_extra is not None:
                body.update(self._status_extra())
        elif msg.action == C.POISONED_RETRY:
            body = {"retried": self.book.poisoned.retry(msg.arguments, now)}
        elif msg.action == C.POISONED_PURGE:
            body = {"purged": self.book.poisoned.purge(msg.arguments)}
        elif msg.action == C.ROUTER_SHOW_WORKERS:
            body = admin_json.show_workers(self.routing)
        elif msg.action == C.ROUTER_SHOW_JOBS:
            body = admin_json.show_jobs(self.routing, now)
        elif msg.action == C.MONITOR:
            body = admin_json.monitor(self.book)
            body["blocked"] = self._blocked
            body["journal_failure"] = self.book.journal.failure
            body.update(self.outbox.as_dict())
            body["held"] = self.marks.withheld_counts()
            body["cancels_refused"] = self.front.cancels_refused
        else:
            body = admin_json.show_schedulers(self.schedulers)
        send(self.admin, identity, Reply(msgid=new_msgid(), payload=json.dumps(body)))

    def _on_admin_disconnect(self, identity: bytes, msg: Message) -> None:
        log.info("DISCONNECT from the admin socket: saying KBAI to every peer and stopping")
        send(self.admin, identity, Ack(msgid=new_msgid(), ack_msgid=msg.msgid))
        for worker_id in list(self.routing.workers):
            send(self.backend, worker_id, Kbai(msgid=new_msgid()))
        for scheduler_id in list(self.schedulers.peers):
            send(self.frontend, scheduler_id, Kbai(msgid=new_msgid()))
        self.stop()

    # -- heartbeats, leases ----------------------------------------------------------
    def _housekeeping(self, now: float) -> None:
        """Drop silent peers, hand out jobs whose lease ran out, send heartbeats."""
        s = self.settings
        book = self.book
        for identity in self.routing.expired(now, s.heartbeat_timeout):
            book.stats.heartbeats_missed += 1
            self.hand_outs.drop_worker(identity, f"silent for more than {s.heartbeat_timeout}s")
        book.outcomes.expire_leases(now)
        for queue, count in self._unserved.check(self.routing, now):
            log.warning(
                "%d job(s) wait on queue %r, which no connected job manager serves; "
                "start one that names it (--queues %s:10 or the QUEUES setting)",
                count,
                queue,
                queue,
            )
        if not self._blocked:  # a blocked frontend is not read: schedulers are not silent
            for identity in self.schedulers.expired(now, s.heartbeat_timeout):
                book.stats.heartbeats_missed += 1
                self.schedulers.remove(identity)
                log.warning(
                    "scheduler %s dropped: silent for more than %ss",
                    show(identity),
                    s.heartbeat_timeout,
                )
        for worker in list(self.routing.workers.values()):
            if now - worker.last_sent >= s.heartbeat_interval:
                self.back.send_to_worker(worker.identity, self._heartbeat(), now)
        for scheduler in list(self.schedulers.peers.values()):
            if now - scheduler.last_sent >= s.heartbeat_interval and send(
                self.frontend, scheduler.identity, self._heartbeat()
            ):
                scheduler.last_sent = now
        book.pump(now)

    @staticmethod
    def _heartbeat() -> Heartbeat:
        return Heartbeat(msgid=new_msgid(), timestamp=time.time())
