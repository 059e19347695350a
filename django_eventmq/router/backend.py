"""The router's backend: job managers (INFORM, READY, DONE, NACK, REPLY, ...) and
handing jobs to them.

What happens to a job lives in :mod:`.book`; this module turns messages into
calls on it. Sending what the book hands out is :mod:`.hand_outs`.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

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
from django_eventmq.protocol.bundle import unbundle
from django_eventmq.protocol.features import ROUTER_FEATURES, TROUBLE, with_bundle_bytes
from django_eventmq.protocol.frame_fields import (
    DoneFields,
    after_identity,
    done_fields,
    ready_identity,
)
from django_eventmq.protocol.packed import done_of
from django_eventmq.protocol.session import RouterPeerSession
from django_eventmq.protocol.status import DONE_STATUSES
from django_eventmq.router.book import Book
from django_eventmq.router.commit_acks import CommitAcks
from django_eventmq.router.frontend import DRAIN_CAP, Handle
from django_eventmq.router.hand_outs import HandOuts
from django_eventmq.runtime import transport
from django_eventmq.runtime.outbox import MEMORY as WARN_MEMORY
from django_eventmq.runtime.outbox import Handler, WarnOnce, forward, send, show
from django_eventmq.runtime.settings import Settings
from django_eventmq.runtime.transport import Channel

log = logging.getLogger("django_eventmq.router")


class Backend:
    """The backend socket's handlers: what job managers send."""

    def __init__(
        self,
        settings: Settings,
        book: Book,
        backend: Channel,
        frontend: Channel,
        hand_outs: HandOuts,
        commits: CommitAcks,
        warn: WarnOnce,
        handle: Handle,
    ) -> None:
        """``frontend``: where REPLY and PARTIAL go on to clients; ``handle``: decodes
        a message the fast paths did not take, then calls its handler
        (:meth:`handlers`)."""
        self.settings = settings
        self.book = book
        #: The book's part that takes job managers' reports (DONE, READY, ...).
        self.reports = book.reports
        self.backend = backend
        self.frontend = frontend
        self.hand_outs = hand_outs
        self.commits = commits
        self._warn = warn
        self._handle = handle
        #: Workers that said KBAI: their late messages are expected, not an error.
        self._departed: OrderedDict[bytes, None] = OrderedDict()
        #: Unknown backend peers we told to DISCONNECT, and when.
        self._told: OrderedDict[bytes, float] = OrderedDict()

    def handlers(self) -> dict[type, Handler]:
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

    def drain(self, now: float) -> None:
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
            self.hand_outs.drop_worker(identity, "informed again")
        routing.add_worker(identity, session.queues, now, session)
        log.info("worker %s connected, queues %s", show(identity), list(session.queues))
        for answer in answers:
            self.send_to_worker(identity, answer, now)
        self.hand_outs.retry = True  # jobs it had may wait again

    def _fast_ready(self, identity: bytes, now: float) -> bool:
        worker = self.book.routing.workers.get(identity)
        if worker is None:
            return False
        worker.last_heard = now
        self.reports.ready(identity, now)
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
                # ``raw`` as received: a packed DONE is its one frame (drain).
                frames = after_identity(self.backend.unpacked(raw) if len(raw) == 2 else raw)
                message = decode(frames)
            except ProtocolError:
                return False
            self._from_unknown_worker(identity, frames, message, now)
            return True
        worker.last_heard = now
        self.reports.done(identity, job_msgid, status, payload, now)
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
            self.reports.ready(identity, now)
        elif kind is Done:
            assert isinstance(msg, Done)
            self.reports.done(identity, msg.job_msgid, msg.status, msg.payload, now)
        elif kind is Partial:
            assert isinstance(msg, Partial)
            self._on_partial(identity, frames, msg)
        elif kind is Reply:
            self._on_reply(identity, frames, msg)
        elif kind is Nack:
            assert isinstance(msg, Nack)
            self.reports.nack(identity, msg.job_msgid, msg.reason, now)
        elif kind is Features:
            session = worker.session
            trouble = session.announced.get(TROUBLE)
            session.receive(msg)  # what it announced: packed, cancel, ...
            if session.announced.get(TROUBLE) != trouble:
                _say_trouble(identity, session.announced.get(TROUBLE))
            holding = session.holding()
            if holding:  # jobs it still runs: a failover or a reconnect
                self.reports.adopt(identity, holding, now)
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
            self.book.outcomes.worker_left(identity, now)
            self._remember_departed(identity)
            log.info("worker %s said goodbye", show(identity))
        # HEARTBEAT, ACK: hearing from it was the point.

    def _on_reply(self, identity: bytes, frames: list[bytes], msg: Message) -> None:
        """The reference's way to report a job: REPLY naming it (then READY)."""
        assert isinstance(msg, Reply)
        if msg.reply_to is None:
            self._warn("backend", identity, "REPLY without the id of the request it answers")
            return
        client = self.reports.reply(identity, msg.reply_to)
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
            self.reports.done(identity, msg.job_msgid, msg.status, msg.payload, now)
        elif isinstance(msg, Nack):
            self.reports.nack(identity, msg.job_msgid, msg.reason, now)
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
    def send_to_worker(self, identity: bytes, message: Message, now: float) -> None:
        """Send ``message`` to a job manager, after the jobs handed to it (a CANCEL may
        follow its job), once they are stored."""
        if self.hand_outs.to(identity):
            self.commits.sync(force=True)
        self.hand_outs.flush()
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
