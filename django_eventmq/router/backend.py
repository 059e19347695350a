"""The router's backend: job managers (INFORM, READY, DONE, NACK, REPLY, ...) and
handing jobs to them.

A mixin of :class:`.router.Router`: the state it uses (sockets, the book)
belongs to the router. What happens to a job lives in :mod:`.book`; this
module turns messages into calls on it and sends what it hands out.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import TYPE_CHECKING

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import (
    Ack,
    Disconnect,
    Done,
    Features,
    Heartbeat,
    Inform,
    Kbai,
    Message,
    Nack,
    Partial,
    Queued,
    Ready,
    Reply,
    Running,
    Unready,
    decode,
    new_msgid,
)
from django_eventmq.protocol import constants as C
from django_eventmq.protocol.bundle import PREFIX as BUNDLE_PREFIX
from django_eventmq.protocol.bundle import bundle, runs, unbundle
from django_eventmq.protocol.headers import with_reply_requested
from django_eventmq.protocol.packed import done_of, pack
from django_eventmq.protocol.session import (
    ROUTER_FEATURES,
    TROUBLE,
    RouterPeerSession,
    with_bundle_bytes,
)
from django_eventmq.protocol.status import DONE_STATUSES
from django_eventmq.protocol.views import (
    DoneFields,
    after_identity,
    done_fields,
    ready_identity,
)
from django_eventmq.router.book import Book
from django_eventmq.router.frontend import DRAIN_CAP
from django_eventmq.router.routing import JobManagerPeer, RoutedJob
from django_eventmq.runtime import tracing, transport
from django_eventmq.runtime.outbox import MEMORY as WARN_MEMORY
from django_eventmq.runtime.outbox import Handler, WarnOnce, forward, send, show
from django_eventmq.runtime.settings import Settings
from django_eventmq.runtime.transport import Channel

log = logging.getLogger("django_eventmq.router")


def _asking_reply(frames: list[bytes]) -> list[bytes]:
    """A stored REQUEST's frames with ``reply-requested`` in its header frame."""
    headers = with_reply_requested(frames[5])
    return frames if headers is frames[5] else [*frames[:5], headers, *frames[6:]]


class BackendHandlers:
    """Handlers for the backend socket (mixed into the router)."""

    settings: Settings
    book: Book
    frontend: Channel
    backend: Channel
    _warn: WarnOnce
    #: A job could not be sent: poll briefly and pump again.
    _retry: bool
    #: Workers that said KBAI: their late messages are expected, not an error.
    _departed: OrderedDict[bytes, None]
    #: Unknown backend peers we told to DISCONNECT, and when.
    _told: OrderedDict[bytes, float]
    #: Jobs handed out and not sent yet (see :meth:`_deliver`).
    _outbox: list[tuple[JobManagerPeer, RoutedJob]]
    #: Jobs up to this seq are in the journal (see :meth:`_flush_deliveries`).
    _durable_seq: int
    #: Held jobs whose lease starts when they are sent (the router's ``_hold_leases``).
    _leases_held: set[int]

    if TYPE_CHECKING:

        def _handle(self, channel: Channel, raw: list[bytes], now: float) -> None: ...

        def _sync(self, *, force: bool = False, now: float | None = None) -> None: ...

    def _backend_handlers(self) -> dict[type, Handler]:
        return {
            Inform: self._on_backend_inform,
            Ready: self._on_worker_message,
            Reply: self._on_worker_message,
            Heartbeat: self._on_worker_message,
            Kbai: self._on_worker_message,
            Ack: self._on_worker_message,
            Done: self._on_worker_message,
            Nack: self._on_worker_message,
            Features: self._on_worker_message,
            Partial: self._on_worker_message,
            Unready: self._on_worker_message,
            Queued: self._on_worker_message,
            Running: self._on_worker_message,
        }

    def _drain_backend(self, now: float) -> None:
        """Take what job managers sent, READY and DONE straight from their frames;
        a bundle (:mod:`..protocol.bundle`) is each message it carries, in order."""
        recv = self.backend.recv_frames
        for taken in range(DRAIN_CAP):
            # As the frontend's drain: EVENTS, not a receive that fails, after the first.
            if taken == 1 and not self.backend.poll(0):
                return
            try:
                raw = recv(flags=transport.NOBLOCK)
            except transport.Again:
                return
            if len(raw) == 2:  # one frame: a bundle, or a packed message
                frame = raw[1]
                if frame.startswith(BUNDLE_PREFIX):
                    self._from_bundle(raw, now)
                    continue
                # A DONE alone (low load) straight from its frame, as a REQUEST is.
                done = done_of(frame)
                if done is not None and self._fast_done((raw[0], *done), raw, now):
                    continue
                raw = self.backend.unpacked(raw)
            self._take(raw, now)

    def _take(self, raw: list[bytes], now: float) -> None:
        """One message a job manager sent (alone or in a bundle)."""
        ready = ready_identity(raw)
        if ready is not None and self._fast_ready(ready, now):
            return
        done = done_fields(raw)
        if done is not None and self._fast_done(done, raw, now):
            return
        self._handle(self.backend, raw, now)

    def _from_bundle(self, raw: list[bytes], now: float) -> None:
        """Each message of a bundle, as if it had come alone (a malformed bundle
        is logged once and dropped: none of its messages is taken)."""
        identity, frame = raw
        try:
            messages = unbundle(frame, [identity], max_frames=self.backend.max_frames)
        except ProtocolError as exc:
            self._warn("backend", identity, f"malformed bundle ({exc.reason})", "dropped")
            return
        for inner in messages:
            if len(inner) == 2:  # a packed message in the bundle: its frames
                inner = self.backend.unpacked(inner)
            self._take(inner, now)

    def _on_backend_inform(
        self, identity: bytes, frames: list[bytes], msg: Message, now: float
    ) -> None:
        assert isinstance(msg, Inform)
        if msg.peer_type != C.PEER_WORKER:
            self._warn("backend", identity, "scheduler INFORM on the backend (use the frontend)")
            return
        # A new conversation: one that INFORMs again restarted (its old one is dropped).
        session = RouterPeerSession(
            features=with_bundle_bytes(ROUTER_FEATURES, self.settings.max_message_bytes)
        )
        answers = session.receive(msg)  # ACK, then our FEATURES
        routing = self.book.routing
        self._departed.pop(identity, None)
        self._told.pop(identity, None)
        if identity in routing.workers:
            self._worker_failed(identity, "informed again")
        routing.add_worker(identity, session.queues, now, session)
        log.info("worker %s connected, queues %s", show(identity), list(session.queues))
        for answer in answers:
            self._send_to_worker(identity, answer, now)
        self._retry = True  # jobs it had may wait again

    def _fast_ready(self, identity: bytes, now: float) -> bool:
        worker = self.book.routing.workers.get(identity)
        if worker is None:
            return False
        worker.last_heard = now
        self.book.ready(identity, now)
        return True

    def _fast_done(self, done: DoneFields, raw: list[bytes], now: float) -> bool:
        """A well-formed DONE read straight from its frames (no message object: it is
        the one message per job on this socket); False: decode it."""
        identity, msgid_b, job_msgid_b, status_b, payload_b = done
        try:
            job_msgid = job_msgid_b.decode()
            status = status_b.decode()
            payload = payload_b.decode()
            msgid_b.decode()
        except UnicodeDecodeError:
            return False
        if not msgid_b or not job_msgid or status not in DONE_STATUSES:
            return False
        worker = self.book.routing.workers.get(identity)
        if worker is None:
            try:
                # ``raw`` as received: a packed DONE is its one frame (_drain_backend).
                frames = after_identity(self.backend.unpacked(raw) if len(raw) == 2 else raw)
                message = decode(frames)
            except ProtocolError:
                return False
            self._from_unknown_worker(identity, frames, message, now)
            return True
        worker.last_heard = now
        self.book.done(identity, job_msgid, status, payload, now)
        return True

    def _on_worker_message(
        self, identity: bytes, frames: list[bytes], msg: Message, now: float
    ) -> None:
        worker = self.book.routing.workers.get(identity)
        if worker is None:
            self._from_unknown_worker(identity, frames, msg, now)
            return
        worker.last_heard = now
        kind = type(msg)
        if kind is Ready:
            self.book.ready(identity, now)
        elif kind is Done:
            assert isinstance(msg, Done)
            self.book.done(identity, msg.job_msgid, msg.status, msg.payload, now)
        elif kind is Partial:
            assert isinstance(msg, Partial)
            self._on_partial(identity, frames, msg)
        elif kind is Reply:
            self._on_reply(identity, frames, msg)
        elif kind is Nack:
            assert isinstance(msg, Nack)
            self.book.nack(identity, msg.job_msgid, msg.reason, now)
        elif kind is Features:
            session = worker.session
            trouble = session.announced.get(TROUBLE)
            session.receive(msg)  # what it announced: packed, cancel, ...
            if session.announced.get(TROUBLE) != trouble:
                _say_trouble(identity, session.announced.get(TROUBLE))
            holding = session.holding()
            if holding:  # jobs it still runs: a failover or a reconnect
                self.book.adopt(identity, holding, now)
        elif kind is Unready:
            assert isinstance(msg, Unready)
            self.book.routing.unready(identity, msg.count)
        elif kind is Queued:
            assert isinstance(msg, Queued)
            self.book.still_queued(identity, msg.job_msgids, now)
        elif kind is Running:
            assert isinstance(msg, Running)
            # Kept for emq_status --jobs only: the start times on our clock.
            worker.running = {m: (int(pid), now - age) for m, (pid, age) in msg.jobs.items()}
        elif kind is Kbai:
            self.book.worker_left(identity, now)
            self._remember_departed(identity)
            log.info("worker %s said goodbye", show(identity))
        # HEARTBEAT, ACK: hearing from it was the point.

    def _on_reply(self, identity: bytes, frames: list[bytes], msg: Message) -> None:
        """The reference's way to report a job: REPLY naming it (then READY)."""
        assert isinstance(msg, Reply)
        if msg.reply_to is None:
            self._warn("backend", identity, "REPLY without the id of the request it answers")
            return
        client = self.book.reply(identity, msg.reply_to)
        if client is None:
            log.debug("REPLY for msgid %s: no client waits for it", msg.reply_to)
            return
        if not forward(self.frontend, client, frames):
            log.info("REPLY for msgid %s dropped: client %s is gone", msg.reply_to, show(client))

    def _on_partial(self, identity: bytes, frames: list[bytes], msg: Partial) -> None:
        """A running job's partial: forwarded as it is to the client that asked for a reply.

        Best effort and not journaled: a partial of a job this worker no longer
        holds, or for a client that cannot take it now, is dropped.
        """
        job = self.book.routing.inflight.get(msg.job_msgid)
        if job is None or job.worker != identity or not job.reply or not job.client:
            log.debug("PARTIAL for msgid %s dropped: no client waits for it here", msg.job_msgid)
            return
        forward(self.frontend, job.client, frames)

    def _from_unknown_worker(
        self, identity: bytes, frames: list[bytes], msg: Message, now: float
    ) -> None:
        # A finished job's report is never thrown away: a job manager that left
        # (or that a restarted router does not know yet) still finished it.
        if isinstance(msg, Reply):
            self._on_reply(identity, frames, msg)
        elif isinstance(msg, Done):
            self.book.done(identity, msg.job_msgid, msg.status, msg.payload, now)
        elif isinstance(msg, Nack):
            self.book.nack(identity, msg.job_msgid, msg.reason, now)
        if isinstance(msg, Kbai) or identity in self._departed:
            log.debug("%s from departed worker %s", msg.command, show(identity))
            return
        self._warn("backend", identity, f"{msg.command} before INFORM", "told to DISCONNECT")
        last = self._told.get(identity)
        if last is None or now - last >= self.settings.heartbeat_interval:
            # The spec's answer to an unexpected command; the peer then INFORMs again.
            self._told[identity] = now
            if len(self._told) > WARN_MEMORY:
                self._told.popitem(last=False)
            send(self.backend, identity, Disconnect(msgid=new_msgid()))

    def _remember_departed(self, identity: bytes) -> None:
        self._departed[identity] = None
        if len(self._departed) > WARN_MEMORY:
            self._departed.popitem(last=False)

    # -- sending to job managers ----------------------------------------------------
    def _deliver(self, worker: JobManagerPeer, job: RoutedJob) -> None:
        """Queue a handed-out job for its worker; :meth:`_flush_deliveries` sends it.

        The jobs one loop iteration hands out are sent together: a message
        written right after another into the same pipe does not wake
        ZeroMQ's I/O thread again, and that wake-up (a system call) was the
        largest per-job cost of the router.
        """
        self._outbox.append((worker, job))

    def _flush_deliveries(self) -> None:
        """Send the queued jobs that are in the journal; a job its worker cannot take
        now waits again (at the front). A job accepted since the last journal
        commit stays queued until a commit returned (the router's :meth:`_sync`):
        a job manager never runs a job the journal may not have."""
        if not self._outbox:
            return
        outbox, self._outbox = self._outbox, []
        durable = self._durable_seq
        ready = [entry for entry in outbox if entry[1].seq <= durable]
        if len(ready) < len(outbox):
            self._outbox = [entry for entry in outbox if entry[1].seq > durable]
        # Per worker, in the order they were handed out: a job manager that reads
        # bundles gets its jobs as one (one send, one receive for the turn).
        by_worker: dict[bytes, list[tuple[JobManagerPeer, RoutedJob]]] = {}
        for entry in ready:
            by_worker.setdefault(entry[0].identity, []).append(entry)
        groups = list(by_worker.values())
        for position, group in enumerate(groups):
            try:
                self._send_jobs(group)
            except BaseException:
                # Unexpected (the caller logs it): the other workers' jobs must not be
                # stranded, leased but never sent. They go out next time (this
                # worker's own went back to the outbox in _send_jobs).
                self._outbox[:0] = [e for later in groups[position + 1 :] for e in later]
                raise

    def _send_jobs(self, group: list[tuple[JobManagerPeer, RoutedJob]]) -> None:
        """Send the jobs of ``group`` (one worker's, in order): as bundles to a job
        manager that reads them, else one message each. A job taken back meanwhile
        is skipped, one whose worker left waits again; a send the worker cannot take
        now (Again) puts its jobs back to wait, an unreachable worker fails with
        every job of its not sent. When a send raises unexpectedly, the jobs after
        it go back to the outbox, for next time."""
        book = self.book
        identity = group[0][0].identity
        worker = book.routing.workers.get(identity)
        jobs: list[RoutedJob] = []
        for entry_worker, job in group:
            if job.worker != identity:
                continue  # taken back meanwhile (its worker failed): it waits again already
            if worker is not entry_worker:
                book.undo(job)  # its worker left before the job went out
                self._retry = True
                continue
            jobs.append(job)
        if worker is None or not jobs:
            return
        send = self.backend.send_frames
        start = 0
        messages = [job.frames for job in jobs]
        # A worker that INFORMed again has a new session: no bundle before its FEATURES.
        # Cut at what its FEATURES said it takes: ZeroMQ drops a peer for a bigger frame.
        session = worker.session
        if session.bundle and len(jobs) > 1:
            cuts = runs(messages, max_bytes=session.bundle_bytes)
        else:
            cuts = [1] * len(jobs)
        for taken in cuts:
            run = jobs[start : start + taken]
            start += taken
            try:
                if taken > 1:
                    frame = bundle(messages[start - taken : start])
                    send([identity, frame], flags=transport.NOBLOCK)
                elif session.packed:
                    send([identity, pack(run[0].frames)], flags=transport.NOBLOCK)
                elif session.extended:
                    send([identity, *run[0].frames], flags=transport.NOBLOCK)
                else:  # a reference job manager: its REPLY says which job ended
                    send([identity, *_asking_reply(run[0].frames)], flags=transport.NOBLOCK)
            except transport.Again:
                log.debug("worker %s is not taking messages; %d job(s) wait", show(identity), taken)
                for job in run:
                    book.undo(job)
                self._retry = True
                continue
            except BaseException as exc:
                if isinstance(exc, transport.ZMQError) and exc.errno == transport.EHOSTUNREACH:
                    for job in jobs[start - taken :]:
                        book.undo(job)
                    self._worker_failed(identity, "unreachable")  # and its jobs still queued
                    self._retry = True
                    return
                # The jobs after it go out next time; its own stay leased (handed out
                # again when the lease ends), as a send that may have left.
                self._outbox[:0] = [(worker, job) for job in jobs[start:]]
                raise
            for job in run:
                self._sent(worker, job)

    def _sent(self, worker: JobManagerPeer, job: RoutedJob) -> None:
        """A job went out to ``worker``."""
        worker.last_sent = job.dispatched_at
        book = self.book
        book.stats.dispatched[job.queue] += 1
        if tracing.ON:  # the hand-out span of a traced job (runtime/tracing.py)
            tracing.handed_out(job.frames, job.msgid, job.queue, show(worker.identity))
        if self._leases_held and job.seq in self._leases_held:
            self._leases_held.discard(job.seq)
            book.lease(job, time.monotonic())  # held back by the journal: its lease starts now

    def _worker_failed(self, identity: bytes, why: str) -> None:
        """Drop a worker; its jobs still in the outbox never left, so they wait again
        without a death counted (deaths poison a job)."""
        self._undo_unsent(identity, self._outbox)
        self.book.worker_failed(identity, why)

    def _undo_unsent(
        self, identity: bytes, entries: list[tuple[JobManagerPeer, RoutedJob]]
    ) -> None:
        for _worker, job in entries:
            if job.worker == identity:
                self.book.undo(job)  # clears job.worker: the flush skips the entry

    def _send_to_worker(self, identity: bytes, message: Message, now: float) -> None:
        # A job handed out goes first (a CANCEL may follow it), once it is stored.
        if any(worker.identity == identity for worker, _job in self._outbox):
            self._sync(force=True)
        self._flush_deliveries()
        if send(self.backend, identity, message):
            worker = self.book.routing.workers.get(identity)
            if worker is not None:
                worker.last_sent = now


def _say_trouble(identity: bytes, trouble: object) -> None:
    """A job manager said it takes no jobs now, and why (or that it takes them again)."""
    if trouble:
        log.warning("worker %s takes no jobs: %s", show(identity), str(trouble)[:500])
    else:
        log.info("worker %s takes jobs again", show(identity))
