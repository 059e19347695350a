"""The router's frontend: clients (REQUEST, BATCH, CANCEL, FEATURES). Schedulers and
what is sent to them (INFORM, SCHEDULE, ...) are in :mod:`.scheduler_relay`, the
queues' own high-water marks in :mod:`.queue_marks`.

Limits (``MAX_BODY_BYTES``, header bounds; see :mod:`..protocol.limits`): a
REQUEST, SCHEDULE or UNSCHEDULE outside them is logged once per peer and
reason and answered with ``REJECT`` naming it, so a client of ours that waits
for its ACK fails at once with the reason. REJECT is sent to every client,
like the router's other refusals (bad body, high-water mark): the reference
client only ever sends on its socket (its ``Sender`` never reads), so a REJECT
waits unread in its pipe and costs it nothing.

BATCH (many REQUESTs in one message, :mod:`..protocol.batch`): each job gets
the checks and the REJECT a REQUEST would, then one ACK of the batch's msgid
follows the journal commit. Its REJECTs are sent at once, so they reach the
client before that ACK; should one not go out (the client's pipe is full),
the batch gets no ACK and the client sends it again. A client learns that we
take BATCH from the FEATURES we answer to its own.

A packed REQUEST (one frame, :mod:`..protocol.packed`) is unpacked here and
handled as any REQUEST; its ACK goes back packed, so the router keeps no
per-client state about who reads packed messages.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from itertools import repeat

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import (
    Ack,
    Cancel,
    Disconnect,
    Features,
    Heartbeat,
    Inform,
    Kbai,
    Message,
    Request,
    Schedule,
    Unschedule,
    new_msgid,
    parse_headers,
)
from django_eventmq.protocol.batch import (
    MAX_BATCH_JOBS,
    Batch,
    BatchJob,
    body_sizes,
    job_bounds,
    jobs_at,
    shared_route,
)
from django_eventmq.protocol.bundle import BUNDLE
from django_eventmq.protocol.extensions import Reject
from django_eventmq.protocol.features import bundle_bytes
from django_eventmq.protocol.frame_fields import (
    BatchFields,
    RequestFields,
    batch_fields,
    identity_of,
    request_fields,
    request_frames,
    stored_request,
)
from django_eventmq.protocol.headers import Headers
from django_eventmq.protocol.limits import Limits, OverLimit
from django_eventmq.protocol.packed import PACKED, request_of
from django_eventmq.protocol.status import FULL_REFUSAL
from django_eventmq.protocol.unique import not_unique_reason
from django_eventmq.router.book import Accepting, Book
from django_eventmq.router.commit_acks import CommitAcks
from django_eventmq.router.journal.store import JournalUnavailable
from django_eventmq.router.queue_marks import QueueMarks, Replay
from django_eventmq.router.scheduler_relay import SchedulerRelay, cannot_store
from django_eventmq.runtime import security, tracing, transport
from django_eventmq.runtime.outbox import Handler, Outbox, WarnOnce, show
from django_eventmq.runtime.settings import Settings
from django_eventmq.runtime.transport import Channel

log = logging.getLogger("django_eventmq.router")

#: Messages taken from one socket per loop iteration, so no socket starves the others.
DRAIN_CAP = 256

#: The router's way to decode a message and call its handler (``Router._handle``).
Handle = Callable[[Channel, list[bytes], float], None]
#: Sends a message to a job manager once the jobs handed to it went (``Backend.send_to_worker``).
ToWorker = Callable[[bytes, Message, float], None]


class Frontend:
    """The frontend socket's handlers: what clients and schedulers send."""

    def __init__(
        self,
        settings: Settings,
        book: Book,
        frontend: Channel,
        outbox: Outbox,
        commits: CommitAcks,
        marks: QueueMarks,
        relay: SchedulerRelay,
        to_worker: ToWorker,
        checks: tuple[WarnOnce, Limits, tuple[type[BaseException], ...]],
        handle: Handle,
    ) -> None:
        """``outbox``: what clients are sent (ACKs, REJECTs, replies, FEATURES),
        counted and bounded; ``checks``: the router's warnings said once, its limits,
        and the exceptions a handler re-raises (``Router.fatal``); ``handle``: decodes
        a message the fast paths did not take and calls its handler (:meth:`handlers`)."""
        self.settings = settings
        self.book = book
        self.frontend = frontend
        self.outbox = outbox
        self.commits = commits
        self.marks = marks
        self.relay = relay
        self._to_worker = to_worker
        self._warn, self._limits, self.fatal = checks
        self._handle = handle
        #: The ACKs waiting for the commit (``CommitAcks.acks``): (client, msgid, packed).
        self._ack = commits.acks.append
        #: CANCEL_POLICY owner with CURVE on: each job keeps the key that sent it,
        #: read with each message (``_sender``), and a CANCEL must come from it or an
        #: admin key.
        self._owners = security.server_curve(settings) and settings.cancel_policy == "owner"
        self._admin_keys: frozenset[str] = frozenset()
        if self._owners:
            admins = security.allowed_keys(settings, security.ADMIN)
            self._admin_keys = frozenset(key.decode() for key in admins)
        self._sender: str | None = None
        #: CANCELs refused under that policy (MONITOR).
        self.cancels_refused = 0
        #: BATCH messages taken, and the jobs they carried (tests and diagnostics).
        self.batches_received = 0
        self.batch_jobs_received = 0

    def handlers(self) -> dict[type, Handler]:
        relay = self.relay
        return {
            Request: self._on_request,
            Batch: self._on_batch,
            Features: self._on_frontend_features,
            Cancel: self._on_cancel,
            Schedule: relay.on_schedule,
            Unschedule: relay.on_schedule,
            Inform: relay.on_inform,
            Heartbeat: relay.on_heartbeat,
            Kbai: relay.on_kbai,
            Disconnect: self._ignore,
            Ack: self._ignore,
        }

    def _over_high_water(self, coming: int = 0) -> bool:
        """At the high-water mark, with ``coming`` jobs (of a BATCH) not stored yet."""
        return self.book.backlog() + coming >= self.settings.high_water_mark

    def drain(self, now: float) -> None:
        """Take what clients sent, REQUESTs straight from their frames."""
        recv = self.frontend.recv_frames
        owners = self._owners
        block = self.settings.hwm_policy == "block"
        schedulers = self.relay.schedulers.peers
        # Jobs that may come before the high-water mark is counted again (a sum over
        # the queues): a REQUEST adds at most one job to the backlog, so counting once
        # per run of REQUESTs gives the answers counting before each one would give.
        room = 0
        for taken in range(DRAIN_CAP):
            # After the first message, ask whether another waits (EVENTS) before
            # reading on: at low load the answer is no, and a receive that fails
            # with Again costs several times as much (its exception).
            if taken == 1 and not self.frontend.poll(0):
                return
            if block:
                if room <= 0:
                    room = self.settings.high_water_mark - self.book.backlog()
                    if room <= 0:
                        return
                room -= 1
            try:
                if owners:
                    raw, self._sender = self.frontend.recv_frames_from(flags=transport.NOBLOCK)
                else:
                    raw = recv(flags=transport.NOBLOCK)
            except transport.Again:
                return
            if schedulers and (scheduler := schedulers.get(identity_of(raw))) is not None:
                # Any message from a scheduler counts as its heartbeat (spec): a busy
                # one sends only REQUESTs.
                scheduler.last_heard = now
            packed = len(raw) == 2
            if packed:
                identity, frame = raw
                fields = request_of(frame)
                if fields is not None and self._fast_request((identity, *fields), now, True):
                    continue
                raw = self.frontend.unpacked(raw)
            request = request_fields(raw)
            if request is not None and self._fast_request(request, now, packed):
                continue
            room = 0  # a BATCH, or any other message: the mark is counted again
            batch = batch_fields(raw)
            if batch is not None:
                self._fast_batch(batch, now)
                continue
            self._handle(self.frontend, raw, now)

    def _fast_request(self, request: RequestFields, now: float, packed: bool = False) -> bool:
        """A well-formed REQUEST without building a message object; False: decode it."""
        identity, msgid_b, queue_b, headers_b, body = request
        try:
            msgid = msgid_b.decode()
            queue = queue_b.decode()
            headers = parse_headers(headers_b.decode())
            body.decode()  # the body must be text; it is forwarded as bytes
        except (UnicodeDecodeError, ProtocolError):
            return False
        if not msgid or not queue:
            return False
        try:
            self._limits.check_request_frames(msgid_b, headers_b, body)
        except OverLimit as exc:
            self.over_limit(identity, exc)
            return True
        job = (msgid_b, queue_b, headers_b, body)
        try:
            self._accept(identity, job, msgid, queue, headers, now, packed=packed)
        except self.fatal:
            raise
        except Exception:
            log.exception("frontend: error handling REQUEST %s from %s", msgid, show(identity))
        return True

    def over_limit(self, identity: bytes, exc: OverLimit) -> None:
        """A client's message outside the limits: warn once, REJECT it (see module doc)."""
        if not exc.msgid:
            self._warn("frontend", identity, exc.reason, "dropped")
            return
        self._warn("frontend", identity, exc.reason, f"REJECT sent for msgid {exc.msgid}")
        self.book.reject(identity, exc.msgid, exc.reason)

    def _on_request(self, identity: bytes, frames: list[bytes], msg: Message, now: float) -> None:
        assert isinstance(msg, Request)
        self._accept(identity, stored_request(frames), msg.msgid, msg.queue, msg.headers, now)

    def _accept(
        self,
        identity: bytes,
        job: BatchJob,
        msgid: str,
        queue: str,
        headers: Headers,
        now: float,
        *,
        packed: bool = False,
    ) -> None:
        """Take a REQUEST (``job``: its msgid, queue, headers and body frames)."""
        msgid_b, queue_b, headers_b, body = job
        reason = self._refusal(queue_b, body, msgid) or self._not_unique(msgid, queue, headers)
        if reason is not None:
            self.book.reject(identity, msgid, reason)
            return
        if (
            self.marks.queue_full(queue)
            and not self.book.is_held(msgid)
            and self.marks.withhold(
                queue,
                msgid,
                1,
                identity,
                self._later(
                    lambda at: self._accept(identity, job, msgid, queue, headers, at, packed=packed)
                ),
            )
        ):
            return
        frames = request_frames(msgid_b, queue_b, headers_b, body)
        # The accept span of a traced job (runtime/tracing.py); it has extra headers.
        span = tracing.start_accept(headers_b, msgid, queue) if headers.extra else None
        try:
            self.book.accept(identity, frames, msgid, queue, headers, now, self._sender)
        except JournalUnavailable as exc:  # it failed with this very insert
            tracing.end(span, exc.reason)
            self.book.reject(identity, msgid, cannot_store(exc.reason))
            return
        if span is not None:
            tracing.end(span)
        # New or a duplicate: either way the job is held; the ACK waits for the commit.
        self._ack((identity, msgid_b, packed))

    def _later(self, replay: Replay) -> Replay:
        """``replay`` as a withheld message's, with the CURVE key it came with."""
        sender = self._sender

        def again(now: float) -> None:
            self._sender = sender  # the key it came with (CANCEL_POLICY owner)
            replay(now)

        return again

    def _refusal(self, queue: bytes, body: bytes, msgid: str, coming: int = 0) -> str | None:
        """Why a REQUEST (or a BATCH's job) of ``queue`` with ``body`` is refused, if
        it is; ``coming``: jobs of its BATCH not stored yet."""
        if body.lstrip()[:1] != b"[":
            return 'bad body: a job is a JSON list such as ["run", {...}]'
        failure = self.book.journal.failure
        if failure is not None and not self.book.is_held(msgid):
            if self.book.stored_while_failing(msgid):
                return None  # a duplicate: acknowledged once what is kept is written
            return cannot_store(failure)
        if (
            self.settings.hwm_policy == "reject"
            and not self.book.is_held(msgid)
            and self._over_high_water(coming)
        ):
            return (
                f"{FULL_REFUSAL}: over its high-water mark ({self.settings.high_water_mark} "
                f"jobs waiting); start a job manager for queue {queue.decode()}, raise "
                "HIGH_WATER_MARK, or send it again later with the same msgid (Spark: the "
                "same run_id)"
            )
        return self.marks.refusal(queue, msgid)

    def _not_unique(self, msgid: str, queue: str, headers: Headers) -> str | None:
        """Why a unique job is refused: another job holds its key (:mod:`.unique`).
        A msgid held already is a duplicate, never refused."""
        if headers.unique_key is None or self.book.is_held(msgid):
            return None
        return self.book.unique.refusal(msgid, queue, headers)

    def _first_in_batch(self, keys: dict[str, str], job: Accepting) -> Accepting | str:
        """``job`` unless an earlier job of its BATCH has its unique key (then the REJECT
        reason); ``keys``: unique key -> msgid of the batch's jobs admitted so far."""
        msgid, queue, key = job[1], job[2], job[3].unique_key
        assert key is not None
        first = keys.setdefault(key, msgid)
        if first == msgid:
            return job
        self.book.unique.refused[queue] += 1
        return not_unique_reason(first, "it is in the same BATCH")

    # -- BATCH -----------------------------------------------------------------------
    def _fast_batch(self, batch: BatchFields, now: float) -> None:
        """A BATCH straight from its frames (:func:`.frame_fields.batch_fields`)."""
        identity, msgid_b, frame = batch
        try:
            if not msgid_b:
                raise ProtocolError("BATCH: msgid is empty")
            msgid_b.decode()
            ends = job_bounds(
                frame, max_jobs=MAX_BATCH_JOBS, max_bytes=self.settings.max_message_bytes
            )
        except UnicodeDecodeError:
            self._warn("frontend", identity, "BATCH: msgid is not UTF-8 text", "dropped BATCH")
            return
        except ProtocolError as exc:
            self._warn("frontend", identity, exc.reason, "dropped BATCH")
            return
        # A parcel keeps no owner: with owners kept, each job is stored with its own.
        parcels = not self._owners and self.book.journal.failure is None
        try:
            # A copy of a parcel held whole (a Spark task retried) adds nothing:
            # acknowledged as held before any check, even while its queue is at
            # its QUEUE_HIGH_WATER_MARK (held again, it would get no answer).
            known = parcels and self.book.same_parcel(frame, len(ends) // 4)
        except JournalUnavailable:
            known = False
        if not known and self.marks.withhold_batch(
            batch, ends, self._later(lambda at: self._fast_batch(batch, at))
        ):
            return
        try:
            as_parcel = known or (parcels and self._as_parcel(identity, frame, ends, now))
        except JournalUnavailable:
            as_parcel = False  # its insert found the journal unwritable: each job is refused
        if as_parcel:
            self.batches_received += 1
            self.batch_jobs_received += len(ends) // 4
            self._ack((identity, msgid_b, False))
            return
        self._accept_batch(identity, msgid_b, jobs_at(frame, ends), now)

    def _on_batch(self, identity: bytes, frames: list[bytes], msg: Message, now: float) -> None:
        assert isinstance(msg, Batch)
        self._accept_batch(identity, msg.msgid.encode(), msg.jobs, now)

    def _accept_batch(
        self, identity: bytes, batch_msgid: bytes, jobs: Sequence[BatchJob], now: float
    ) -> None:
        """Each job as a REQUEST; one ACK for the batch unless a REJECT could not be sent."""
        self.batches_received += 1
        self.batch_jobs_received += len(jobs)
        told = True
        admitted: list[Accepting] = []
        keys: dict[str, str] = {}  # unique key -> msgid, of this batch's admitted jobs
        try:
            for job in jobs:
                checked = self._batch_job(identity, job, len(admitted))
                if not isinstance(checked, str) and checked[3].unique_key is not None:
                    checked = self._first_in_batch(keys, checked)
                if isinstance(checked, str):
                    told = self._reject_now(identity, job[0].decode(), checked) and told
                else:
                    admitted.append(checked)
            self.book.accept_many(identity, admitted, now, self._sender)
        except self.fatal:
            raise
        except JournalUnavailable as exc:
            log.warning("BATCH %s not stored: journal: %s", show(batch_msgid), exc.reason)
            return
        except Exception:
            # No ACK: the client sends the batch again; the jobs held by then are duplicates.
            log.exception(
                "frontend: error handling BATCH %s from %s", show(batch_msgid), show(identity)
            )
            return
        if told:
            self._ack((identity, batch_msgid, False))

    def _as_parcel(self, identity: bytes, frame: bytes, ends: list[int], now: float) -> bool:
        """Store the BATCH as one parcel (:meth:`.Book.accept_parcel`) if its jobs
        share queue and headers and plainly pass a REQUEST's checks; False, nothing
        done, otherwise: each job then goes through them one by one."""
        route = shared_route(frame, ends)
        if (
            route is None
            or not route[0]
            or self.marks.queue_full(route[0].decode())
            or self.book.journal.failure is not None
        ):
            return False
        sizes = body_sizes(ends)
        # Each body at least "[" and more, within the limit, and a JSON list (a
        # REQUEST's check, without the leading white space it allows).
        if (
            min(sizes) < 2
            or max(sizes) > self._limits.max_body_bytes
            or not all(map(frame.startswith, repeat(b"["), ends[3::4]))
        ):
            return False
        try:
            headers = parse_headers(route[1].decode())
            self._limits.check_headers(headers)
        except ProtocolError:
            return False
        count = len(sizes)
        # The last job would be refused: each job then gets its own answer.
        if self.settings.hwm_policy == "reject" and self._over_high_water(count - 1):
            return False
        first_last = (frame[ends[0] : ends[1]].decode(), frame[ends[-5] : ends[-4]].decode())
        return self.book.accept_parcel(
            identity, frame, count, route[0].decode(), headers, route[1], now, first_last
        )

    def _batch_job(self, identity: bytes, job: BatchJob, coming: int) -> Accepting | str:
        """One job of a BATCH through a REQUEST's checks: what to accept, or the REJECT
        reason. ``coming``: jobs of the batch that passed before it."""
        msgid_b, queue_b, headers_b, body = job
        # unpack_jobs checked that every field is UTF-8 text and the msgid is not empty.
        msgid = msgid_b.decode()
        queue = queue_b.decode()
        if not queue:
            return "REQUEST: queue name is empty"
        try:
            headers = parse_headers(headers_b.decode())
            self._limits.check_request_frames(msgid_b, headers_b, body)
        except OverLimit as exc:
            self._warn("frontend", identity, exc.reason, f"REJECT sent for msgid {msgid}")
            return exc.reason
        except ProtocolError as exc:
            return exc.reason
        frames = request_frames(msgid_b, queue_b, headers_b, body)
        reason = self._refusal(queue_b, body, msgid, coming) or self._not_unique(
            msgid, queue, headers
        )
        return (frames, msgid, queue, headers) if reason is None else reason

    def _reject_now(self, identity: bytes, msgid: str, reason: str) -> bool:
        """:meth:`Book.reject`, sent at once; False if the client's pipe did not take it."""
        self.book.rejected += 1
        return self.outbox.send(identity, Reject(msgid=new_msgid(), job_msgid=msgid, reason=reason))

    def _on_frontend_features(
        self, identity: bytes, frames: list[bytes], msg: Message, now: float
    ) -> None:
        """A client says what it speaks; we answer with what our frontend takes."""
        limit = bundle_bytes(msg.features.get(BUNDLE)) if isinstance(msg, Features) else 0
        if limit:
            self.commits.reads_bundles(identity, limit)  # its ACKs go bundled (CommitAcks.sync)
        features = {
            PACKED: 1,
            "batch": 1,
            "batch_jobs": MAX_BATCH_JOBS,
            # ZeroMQ drops a peer that sends a bigger frame (MAXMSGSIZE).
            "batch_bytes": self.settings.max_message_bytes,
            # Named by a sender that finds us full (not reading: it cannot ask then).
            "high_water_mark": self.settings.high_water_mark,
        }
        self.outbox.send(identity, Features(msgid=new_msgid(), features=features))

    def _on_cancel(self, identity: bytes, frames: list[bytes], msg: Message, now: float) -> None:
        assert isinstance(msg, Cancel)
        if self._owners and not self._may_cancel(identity, msg.job_msgid):
            return
        running = self.book.outcomes.cancel(msg.job_msgid)
        if running is None:
            return
        worker = self.book.routing.workers.get(running.worker) if running.worker else None
        if worker is not None and worker.session.speaks("cancel"):
            self._to_worker(worker.identity, worker.session.cancel(msg.job_msgid), now)
        else:
            log.info(
                "CANCEL for msgid %s: it runs on a job manager that cannot cancel; it runs on",
                msg.job_msgid,
            )

    def _may_cancel(self, identity: bytes, job_msgid: str) -> bool:
        """CANCEL_POLICY owner: the key that sent the job, or an admin key, may cancel it."""
        sender = self._sender or ""
        if sender in self._admin_keys:
            return True
        try:
            owner = self.book.journal.owner_of(job_msgid)
        except JournalUnavailable as exc:  # who sent it is unknown: refuse, it may be held
            log.warning("CANCEL for msgid %s not applied: journal: %s", job_msgid, exc.reason)
            return False
        if owner is None or owner == sender:
            return True  # not held (nothing to cancel), or its own
        self.cancels_refused += 1
        self._warn(
            "frontend",
            identity,
            "CANCEL for a job sent with another CURVE key (CANCEL_POLICY is 'owner': only "
            "that key or an admin key from CURVE_ADMIN_CLIENTS may cancel it)",
            f"refused for msgid {job_msgid}",
        )
        return False

    def _ignore(self, identity: bytes, frames: list[bytes], msg: Message, now: float) -> None:
        log.debug("%s from %s ignored", msg.command, show(identity))
