"""Guaranteed bulk sending: :class:`Pipeline`, many REQUESTs with a window of them
unacknowledged, and its defaults.

:class:`Pipeline` keeps up to ``window`` REQUESTs sent and not yet answered
on a DEALER channel. Each one stays in the window until the router answers
it: ACK (stored: our router sends it only once the job is in its journal),
REJECT (refused, with a reason) or, from a reference router, the REPLY whose
payload is the msgid. A REQUEST not answered within ``ack_timeout`` is sent
again *with the same msgid*; the router holds a msgid once, so a resend can
not double a job. :meth:`Pipeline.flush` returns once every REQUEST was
answered, and raises :class:`~django_eventmq.errors.BrokerUnavailable` when
the router said nothing for ``give_up`` seconds while some waited.

It sends as fast as the router acknowledges, where a guaranteed send that
waits for each ACK in turn pays a round trip (and a journal commit) per job.
Used by :meth:`.connection.Client.send_many` and by the Spark integration.

BATCH (our extension, :mod:`..protocol.batch`): with its first job the
pipeline sends FEATURES and goes on with REQUESTs without waiting. Once a
router of ours answers with FEATURES saying ``"batch"``, jobs go in BATCH
messages of up to ``batch`` jobs, each acknowledged by one ACK of the
batch's msgid: a router spends far less per job on one frame than on a
REQUEST's seven, and sends one ACK instead of hundreds. The window still
counts jobs. A job of a batch that the router refuses gets its own REJECT
(before the batch's ACK); a batch not acknowledged within ``ack_timeout`` is
sent again with the same batch msgid and the same job msgids (less those
refused meanwhile), so nothing runs twice. A router that never answers
FEATURES (the reference) gets REQUESTs only.

Batches are cut at fixed places of the stream of jobs: after job ``batch``,
``2 * batch``, ... counted from the first job the pipeline took, whatever
went as REQUESTs before the router's FEATURES came (or a full byte budget
cut early). The same jobs sent again in the same order (a Spark task
retried, an export sent again with the same run_id) therefore make the same
BATCH messages, which a router of ours recognises as a whole when it holds
them already (parcels, :meth:`~django_eventmq.router.book.Book.same_parcel`): not counted
again as waiting, nor toward its high-water mark.

What a send reports (:class:`QueueCounts`, :class:`SendResult`) is in
:mod:`.send_result`; the encoding of REQUESTs, the checks of a pipeline's
parameters and a BATCH in flight are in :mod:`.request_batch` (both
re-exported here); the FEATURES a client offers in :mod:`.handshake`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

# Re-exported (``X as X``): the client, its sharded form and the Spark sender
# import these from here.
from django_eventmq.client import stalls
from django_eventmq.client.handshake import Handshake
from django_eventmq.client.request_batch import batch_limits
from django_eventmq.client.request_batch import check_window as check_window
from django_eventmq.client.request_batch import encode_requests as encode_requests
from django_eventmq.client.send_result import REASONS_KEPT as REASONS_KEPT
from django_eventmq.client.send_result import QueueCounts as QueueCounts
from django_eventmq.client.send_result import SendResult as SendResult
from django_eventmq.client.unanswered import SentBatch, Unanswered
from django_eventmq.errors import BrokerUnavailable, ProtocolError
from django_eventmq.protocol import Features, Reply, decode, new_msgid
from django_eventmq.protocol.batch import JOB_OVERHEAD, MAX_BATCH_JOBS
from django_eventmq.protocol.bundle import is_bundle, unbundle
from django_eventmq.protocol.extensions import Reject
from django_eventmq.protocol.frame_fields import acked_msgid, batch_frames, request_frames
from django_eventmq.runtime import transport

log = logging.getLogger("django_eventmq.client")

#: REQUESTs in flight (sent, not yet answered) per pipeline.
DEFAULT_WINDOW = 10_000
#: The window of :meth:`.connection.Client.send_many`: enough to keep a router's
#: group commits full, small enough to resend cheaply after a router restart.
CLIENT_WINDOW = 2_000
#: Seconds without an answer after which a REQUEST is sent again (same msgid).
DEFAULT_ACK_TIMEOUT = 10.0
#: Seconds without any answer from the router, while REQUESTs wait, before giving up.
DEFAULT_GIVE_UP = 120.0
#: Sends between two non-blocking reads of the answers.
READ_EVERY = 64
#: Jobs per BATCH once the router said it takes them (0: REQUESTs only). Big
#: enough that a router's per-message costs vanish, small enough that a
#: window holds several batches in flight.
DEFAULT_BATCH = 500
#: Bytes of one BATCH's jobs at most (less if the router's FEATURES say so); a
#: job bigger than this alone goes as a REQUEST.
DEFAULT_BATCH_BYTES = 1024 * 1024
#: Seconds a Spark task holds its first jobs for the router's FEATURES answer
#: (``features_wait``): a router of ours answers at once; a reference router
#: never does, and then costs this once per task.
FEATURES_WAIT = 1.0

_NOBLOCK = transport.NOBLOCK


class Pipeline:
    """Up to ``window`` jobs in flight on ``channel`` (a DEALER), resending the silent ones.

    The channel belongs to the caller (made in the thread that uses it, with
    a send high-water mark of at least ``window``). What the router sends
    that is not an answer to a job in flight goes to ``on_other``.

    ``batch``: jobs per BATCH once the router says it takes BATCH (0: send
    REQUESTs only, and ask nothing). ``handshake``: the FEATURES handshake of
    the socket's owner (a client's), which the pipeline asks and answers
    through; without one it makes its own, knowing ``router_features`` if
    given (the router's answer to an earlier handshake on this socket). Known
    FEATURES: none is sent and batching starts at once if they allow it.
    ``features_wait``: seconds to hold the first jobs (staged as for a BATCH)
    for the answer to our FEATURES before sending them as REQUESTs; with it a
    router of ours gets BATCHes cut at the same places from the first job on
    (see the module doc). 0: REQUESTs until the answer comes.
    """

    def __init__(
        self,
        channel: transport.Channel,
        *,
        addr: str,
        window: int = DEFAULT_WINDOW,
        ack_timeout: float = DEFAULT_ACK_TIMEOUT,
        give_up: float = DEFAULT_GIVE_UP,
        batch: int = DEFAULT_BATCH,
        router_features: Mapping[str, Any] | None = None,
        handshake: Handshake | None = None,
        features_wait: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        on_wait: Callable[[], object] | None = None,
        on_other: Callable[[list[bytes]], object] | None = None,
        on_reject: Callable[[bytes, str], object] | None = None,
        on_answer: Callable[[bytes], object] | None = None,
        logger: logging.Logger = log,
        send_timeout: float | None = None,
    ) -> None:
        check_window(window, ack_timeout, give_up, batch)
        self.channel = channel
        self.addr = addr
        self.window = window
        self.ack_timeout = ack_timeout
        self.give_up = give_up
        #: With nothing in flight, how long a job may wait for a connection to take
        #: it (``SEND_TIMEOUT``, as ``.delay()``); None: ``give_up``.
        self.send_timeout = send_timeout
        self.batch = batch
        self._clock = clock
        #: Called whenever the pipeline waits for answers (progress reports).
        self.on_wait = on_wait
        #: Called with the frames of every message that answers no job in flight.
        self.on_other = on_other
        #: Called with the msgid and reason of every job the router refused.
        self.on_reject = on_reject
        #: Called with the msgid of every job answered (ACK or REJECT): a sender
        #: spreading jobs over router groups knows what a group that went away
        #: still owed it (:mod:`.shards`).
        self.on_answer = on_answer
        self._log = logger
        #: Per queue name.
        self.counts: dict[str, QueueCounts] = {}
        if handshake is None:
            handshake = Handshake(channel, wait=give_up, known=router_features)
        #: Our FEATURES and the router's answer, shared with the socket's owner.
        self.handshake = handshake
        #: BATCH messages sent (resends not counted).
        self.batches_sent = 0
        #: REQUESTs and BATCHes sent and not answered yet.
        self.unanswered = Unanswered()
        # Jobs for the next BATCH, not sent yet, and their size in the jobs frame.
        self._staged: dict[bytes, tuple[bytes, bytes, bytes]] = {}
        self._staged_bytes = 0
        # Jobs and bytes per BATCH; 0 jobs: REQUESTs (the router has not said "batch").
        self._batch_jobs = 0
        self._batch_bytes = DEFAULT_BATCH_BYTES
        self._asked = batch == 0
        self.features_wait = features_wait
        # Jobs per BATCH while the router's answer is awaited (0: not awaited).
        self._provisional = 0
        if handshake.router_features is not None:
            self._asked = True
            self._use_features(handshake.router_features)
        elif not self._asked and features_wait > 0:
            self._provisional = max(1, min(batch, MAX_BATCH_JOBS, window // 2))
        self._by_queue: dict[bytes, QueueCounts] = {}
        #: Jobs taken (not counting those already in flight): where BATCHes are cut.
        self._taken = 0
        self._last_answer = clock()
        # When a job was last answered (or the window last filled from empty):
        # the answers to our FEATURES probes say the router reads, not that it
        # takes our jobs.
        self._last_progress = self._last_answer
        self._probed = 0.0
        self._sends = 0
        self._warned = False

    @property
    def router_features(self) -> dict[str, Any] | None:
        """The router's FEATURES once known (None: not answered, e.g. a reference router)."""
        return self.handshake.router_features

    # -- sending -----------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        """Jobs taken and not yet answered (sent, or waiting to fill a BATCH)."""
        return self.unanswered.jobs + len(self._staged)

    @property
    def batching(self) -> bool:
        """True once jobs go in BATCH messages (the router said it takes them)."""
        return self._batch_jobs > 0

    def send(self, msgid: bytes, queue: bytes, headers: bytes, body: bytes) -> None:
        """Send one job (fields already encoded); waits while the window is full."""
        self.send_requests(((msgid, queue, headers, body),))

    def send_columns(
        self,
        msgids: Iterable[bytes],
        queues: Iterable[bytes],
        headers: bytes,
        bodies: Iterable[bytes],
    ) -> None:
        """Send jobs for parallel sequences of msgids, queue names and bodies."""
        self.send_requests(
            (msgid, queue, headers, body)
            for msgid, queue, body in zip(msgids, queues, bodies, strict=True)
        )

    def send_requests(self, requests: Iterable[tuple[bytes, bytes, bytes, bytes]]) -> None:
        """Send ``(msgid, queue, headers, body)`` jobs, waiting while the window is full.

        Jobs may wait to fill a BATCH: :meth:`flush` sends them.
        """
        pending = self.unanswered.requests
        in_batch = self.unanswered.in_batch
        by_queue = self._by_queue
        window = self.window
        if not self._asked:
            self._ask_features()
        for msgid, queue, headers, body in requests:
            counts = by_queue.get(queue) or self._counts_for(queue)
            staged = self._staged
            if msgid in pending or msgid in in_batch or msgid in staged:
                counts.duplicates += 1
                continue
            if len(pending) + len(in_batch) + len(staged) >= window:
                while len(pending) + len(in_batch) + len(self._staged) >= window:
                    # Answers to what is in flight make room: a BATCH cut here
                    # would be cut where a resend of the same jobs may not cut.
                    self._wait(send_staged=not (pending or in_batch))
                staged = self._staged
            counts.sent += 1
            self._taken += 1
            cut = self._batch_jobs or self._provisional
            if cut:
                size = len(msgid) + len(queue) + len(headers) + len(body) + JOB_OVERHEAD
                if size < self._batch_bytes:
                    # Staged for the next BATCH, sent once full (by jobs or bytes).
                    if self._staged_bytes + size >= self._batch_bytes:
                        self._send_staged()
                        staged = self._staged
                    staged[msgid] = (queue, headers, body)
                    self._staged_bytes += size
                    if self._taken % cut == 0:
                        self._send_staged()
                    continue
                # Too big for a BATCH: a REQUEST, as without batching.
            self._send_request(msgid, queue, headers, body)

    def _send_request(self, msgid: bytes, queue: bytes, headers: bytes, body: bytes) -> None:
        unanswered = self.unanswered
        if not unanswered.requests and not unanswered.in_batch:
            self._last_answer = self._last_progress = self._clock()  # the give-up clock starts
        self._send(request_frames(msgid, queue, headers, body))
        unanswered.requests[msgid] = (queue, headers, body, self._clock())
        self._sends += 1
        if self._sends % READ_EVERY == 0:
            self._read()

    def flush(self) -> None:
        """Send the jobs waiting for a BATCH, then wait until the router answered every job
        (ACK or REJECT).

        Raises :class:`BrokerUnavailable` when the router said nothing for
        ``give_up`` seconds while jobs were waiting, or left a BATCH unanswered
        that long while answering others.
        """
        while self._staged or self.unanswered.any:
            self._wait()

    # -- internals ----------------------------------------------------------------
    def _counts_for(self, queue: bytes) -> QueueCounts:
        name = queue.decode()
        counts = self.counts.setdefault(name, QueueCounts())
        self._by_queue[queue] = counts
        return counts

    def _ask_features(self) -> None:
        """Tell the router we speak BATCH; its FEATURES answer switches us to it."""
        self._asked = True
        if not self.handshake.ask():
            self._provisional = 0
            self._log.debug("FEATURES not sent (the pipe is full): sending REQUESTs only")

    def _await_features(self) -> None:
        """Wait up to ``features_wait`` for the router's FEATURES (once). Still none:
        one staged job goes as a REQUEST, and the rest waits for its answer (or
        for FEATURES). A router that answers REQUESTs only (the reference) then
        gets them; one of ours that reads nothing (full) gets that one job to
        find later, not a window of REQUESTs it would store beside the BATCHes
        of an earlier attempt it holds (those it recognises, REQUESTs not)."""
        deadline = self._clock() + self.features_wait
        while self.router_features is None and self._clock() < deadline:
            self._wait(send_staged=False)
        self._provisional = 0
        if self.router_features is not None or not self._staged:
            return
        msgid = next(iter(self._staged))
        queue, headers, body = self._staged.pop(msgid)
        self._staged_bytes -= len(msgid) + len(queue) + len(headers) + len(body) + JOB_OVERHEAD
        self._send_request(msgid, queue, headers, body)
        while msgid in self.unanswered.requests and self.router_features is None:
            self._wait(send_staged=False)

    def _use_features(self, features: Mapping[str, Any]) -> None:
        """The router's FEATURES: batch if it takes BATCH, within its bounds."""
        self._provisional = 0
        if not self.batch or not features.get("batch"):
            return
        self._batch_jobs, self._batch_bytes = batch_limits(
            features, self.batch, self.window, DEFAULT_BATCH_BYTES
        )

    def _send_staged(self) -> None:
        """Send the jobs waiting for a BATCH as one BATCH (as REQUESTs if the router
        did not say it takes BATCH while we waited for its FEATURES)."""
        if not self._batch_jobs and self._provisional:
            self._await_features()
        jobs = self._staged
        if not jobs:
            return
        self._staged = {}
        self._staged_bytes = 0
        size = self._batch_jobs
        if not size:  # the router did not say it takes BATCH
            for msgid, (queue, headers, body) in jobs.items():
                self._send_request(msgid, queue, headers, body)
        elif len(jobs) <= size:
            self._send_batch(jobs)
        else:  # it takes smaller BATCHes than we staged for
            items = list(jobs.items())
            for at in range(0, len(items), size):
                self._send_batch(dict(items[at : at + size]))

    def _send_batch(self, jobs: dict[bytes, tuple[bytes, bytes, bytes]]) -> None:
        now = self._clock()
        if not self.unanswered.any:
            self._last_answer = self._last_progress = now  # the give-up clock starts now
        batch_msgid = new_msgid().encode()
        batch = SentBatch(jobs, now)
        # Known before the send, which may wait for (and read) answers.
        self.unanswered.add_batch(batch_msgid, batch)
        self._send(batch_frames(batch_msgid, batch.pack()))
        self.batches_sent += 1
        self._read()

    def _send(self, frames: Sequence[bytes]) -> None:
        if self._try_send(frames):
            return
        # Nothing in flight and the socket takes nothing: no router is connected (it
        # queues only toward one), not a busy one: SEND_TIMEOUT, as .delay().
        unconnected = self.send_timeout is not None and not self.unanswered.any
        if unconnected and self.channel.peer_connected() is True:
            unconnected = False  # up and full: RouterFull below, after give_up
        wait = self.send_timeout if unconnected and self.send_timeout is not None else self.give_up
        deadline = self._clock() + wait
        while not self._try_send(frames):
            # The pipe to the router is full: it is not reading. Wait for
            # answers (or give up) instead of blocking for ever.
            if self._clock() > deadline:
                if unconnected:
                    raise BrokerUnavailable(
                        f"no router connected at {self.addr} within "
                        f"SEND_TIMEOUT={wait:g}s (is emq_router running?)"
                    )
                self._raise_if_full("took no message from us")
                raise BrokerUnavailable(
                    f"the router at {self.addr} took no message for {self.give_up:g}s"
                )
            self._wait()

    def _try_send(self, frames: Sequence[bytes]) -> bool:
        try:
            self.channel.send_frames(frames, flags=_NOBLOCK)
        except transport.Again:
            return False
        return True

    def _wait(self, *, send_staged: bool = True) -> None:
        """Send the jobs waiting for a BATCH (unless told not to), wait a little for
        answers, then resend what is overdue."""
        if send_staged and self._staged:
            self._send_staged()
        if self.on_wait is not None:
            self.on_wait()
        now = self._clock()
        timeout = self.ack_timeout
        oldest = self.unanswered.oldest_sent()
        if oldest is not None:
            timeout = max(0.0, oldest + self.ack_timeout - now)
        if self.channel.poll(int(min(timeout, 0.1) * 1000) + 1):
            self._read()
        now = self._clock()
        self._check_give_up(now)
        self._resend_due(now)
        self._probe(now)

    def _check_give_up(self, now: float) -> None:
        """Raise once the router has been silent for ``give_up`` seconds while jobs wait,
        or has left a BATCH unanswered that long (:mod:`.stalls` says why)."""
        give_up = self.give_up
        # It reads (answers something, if only our FEATURES) but took no job of ours.
        stalled = now - self._last_progress > give_up and now - self._last_answer <= give_up
        unanswered = self.unanswered
        for batch_msgid, batch in unanswered.batches.items():
            if now - batch.first_sent > give_up and (self._last_answer > batch.sent_at or stalled):
                # It answers others (since this one was last sent, or at all
                # while it takes no job) but never this one: it refuses it (a
                # router of ours logs why), and sending it again will not change
                # that. Silent since: full or gone, below.
                raise stalls.batch_unanswered(self.addr, batch_msgid, batch, give_up)
        if unanswered.any and now - self._last_answer > give_up:
            self._raise_if_full("answered nothing")
            raise stalls.router_silent(
                self.addr,
                give_up,
                len(unanswered.requests),
                len(unanswered.in_batch),
                len(unanswered.batches),
            )
        if unanswered.any and stalled:
            raise stalls.router_stalled(self.addr, give_up, unanswered.jobs, unanswered.queues())

    def _probe(self, now: float) -> None:
        """A router of ours silent for ``ack_timeout`` while jobs wait is asked for its
        FEATURES, which it answers whenever it reads: an answer means it reads (so
        a BATCH it leaves unanswered is refused), none means it does not."""
        if (
            self.router_features is not None
            and now - self._last_answer >= self.ack_timeout
            and now - self._probed >= self.ack_timeout
            and self.unanswered.any
        ):
            self._probed = now
            self._try_send(self.handshake.probe())

    def _raise_if_full(self, what: str) -> None:
        """Raise :class:`RouterFull` if the router is up though it ``what`` for
        ``give_up`` seconds: connected (a channel made with ``watch_peer``), so it
        runs and does not read, which a router of ours does only above its
        high-water mark. A dead router gives silence and no connection."""
        if self.channel.peer_connected():
            raise stalls.router_full(
                self.addr,
                what,
                self.give_up,
                self.in_flight,
                self.unanswered.queues(),
                self.router_features,
            )

    def _resend_due(self, now: float) -> None:
        pending = self.unanswered.requests
        while pending:
            msgid, (queue, headers, body, sent_at) = next(iter(pending.items()))
            if now - sent_at < self.ack_timeout:
                break
            if not self._try_send(request_frames(msgid, queue, headers, body)):
                return  # the pipe is full; the next wait tries again
            del pending[msgid]
            pending[msgid] = (queue, headers, body, now)
            self._by_queue[queue].resent += 1
        batches = self.unanswered.batches
        while batches:
            batch_msgid, batch = next(iter(batches.items()))
            if now - batch.sent_at < self.ack_timeout:
                return
            if not self._try_send(batch_frames(batch_msgid, batch.pack())):
                return
            del batches[batch_msgid]
            batches[batch_msgid] = batch
            batch.sent_at = now
            by_queue = self._by_queue
            for queue, _headers, _body in batch.jobs.values():
                by_queue[queue].resent += 1

    def _read(self) -> None:
        """Take every answer waiting on the socket, without blocking."""
        recv = self.channel.recv_frames
        while True:
            try:
                frames = recv(flags=_NOBLOCK)
            except transport.Again:
                return
            self._last_answer = self._clock()
            if len(frames) == 1 and is_bundle(frames[0]):
                self._bundle(frames[0])
            else:
                self._answer(frames)

    def _bundle(self, frame: bytes) -> None:
        """Each message of a bundle (the ACKs one commit released), as if alone."""
        try:
            messages = unbundle(frame)
        except ProtocolError as exc:
            self._warn_once(f"ignored a malformed bundle from the router: {exc.reason}")
            return
        for frames in messages:
            self._answer(frames)

    def _answer(self, frames: list[bytes]) -> None:
        """One answer of the router."""
        unanswered = self.unanswered
        pending = unanswered.requests
        batches = unanswered.batches
        # The hot path: the ACK of one of our msgids.
        acked = acked_msgid(frames)
        if acked is not None:
            entry = pending.pop(acked, None)
            if entry is not None:
                self._by_queue[entry[0]].acked += 1
                self._last_progress = self._last_answer
                if self.on_answer is not None:
                    self.on_answer(acked)
            elif batches:
                batch = batches.pop(acked, None)
                if batch is not None:
                    self._batch_acked(batch)
                    self._last_progress = self._last_answer
            # else: a late ACK of a msgid we resent; the first one counted.
        else:
            self._other(frames)

    def _batch_acked(self, batch: SentBatch) -> None:
        """Every job of ``batch`` not refused (REJECT came first) is stored."""
        in_batch = self.unanswered.in_batch
        by_queue = self._by_queue
        on_answer = self.on_answer
        for msgid, (queue, _headers, _body) in batch.jobs.items():
            del in_batch[msgid]
            by_queue[queue].acked += 1
            if on_answer is not None:
                on_answer(msgid)

    def _other(self, frames: list[bytes]) -> None:
        try:
            message = decode(frames)
        except ProtocolError as exc:
            self._warn_once(f"ignored a malformed message from the router: {exc.reason}")
            return
        if isinstance(message, Reject):
            key = message.job_msgid.encode()
            queue = self.unanswered.refused(key)
            if queue is not None:
                self._last_progress = self._last_answer
                if self.on_answer is not None:
                    self.on_answer(key)
                counts = self._by_queue[queue]
                counts.rejected += 1
                if len(counts.reasons) < REASONS_KEPT and message.reason not in counts.reasons:
                    counts.reasons.append(message.reason)
                if self.on_reject is not None:
                    self.on_reject(key, message.reason)
                return
        elif isinstance(message, Reply) and message.reply_to is None:
            # The reference router's receipt for a REQUEST: REPLY with its msgid.
            key = message.payload.encode()
            entry = self.unanswered.requests.pop(key, None)
            if entry is not None:
                self._by_queue[entry[0]].acked += 1
                self._last_progress = self._last_answer
                if self.on_answer is not None:
                    self.on_answer(key)
                return
        elif isinstance(message, Features):
            self.handshake.answered(message.features)
            self._use_features(message.features)
            return
        if self.on_other is not None:
            self.on_other(frames)
        else:
            self._log.debug("ignored %s from the router", message.command)

    def _warn_once(self, text: str) -> None:
        if not self._warned:
            self._warned = True
            self._log.warning("%s (further ones are not logged)", text)
