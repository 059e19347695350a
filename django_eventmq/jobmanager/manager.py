"""The job manager: takes jobs from the router and runs them in worker children.

One DEALER socket to the router's backend and one pipe per worker child
(:mod:`.pool`), all waited on by one ``transport.FdPoller``. The job manager announces
``concurrency`` + its current prefetch free slots with READY (the prefetch
follows how long jobs run, :mod:`.prefetch`), hands each REQUEST to a child
(:mod:`.lifecycle`), reports each outcome, and announces the freed slot. It
heartbeats and reconnects with back-off when the router goes quiet
(:mod:`.link`), and stops gracefully on SIGTERM.

Two ways to report, chosen per connection:

* Reference mode (the router never sent FEATURES): REPLY when the client
  asked for one, then READY for the freed slot, exactly as the reference job
  manager does. A failed job with ``retry-count`` is retried here.
* DONE mode (our router sent FEATURES right after its ACK): one ``DONE`` per
  job carries the status and reply and frees the slot; ``retry`` lets the
  router requeue it; unstarted jobs go back with ``NACK`` when we stop; the
  router may ``CANCEL`` a job; a running job's partials go as ``PARTIAL``
  (coalesced, :mod:`.progress`) when its FEATURES said ``"partial"``.

Until the mode is known (just after the ACK, or while disconnected) outcomes
wait in the session, and their slots are not offered. The conversation's
state (mode, the router's FEATURES, credit, waiting outcomes) is all in
``self.link.session`` (:class:`~django_eventmq.protocol.session.JobManagerSession`);
this module decides what to do with jobs.

Choices worth knowing:

* READY is sent after the router ACKs our INFORM (the reference router drops a
  READY from a worker it does not know), and only once the mode is settled:
  our answer to FEATURES goes before the first READY, so our router knows at
  once that we report with DONE. With a reference router the first READY
  waits for its first message after the ACK, or ``protocol.features.FEATURES_WAIT`` at most.
* ``QUEUE_ALLOWED_JOBS`` is checked here, before a job reaches a child: a job
  not allowed on its queue is answered ``refused`` and never runs.
* A REQUEST for a queue we did not announce is run anyway (the registry still
  decides whether it may run); the router chose us, and dropping it would lose
  the job.
* We say goodbye with the ``KBYE`` spelling of KBAI: the reference router only
  forgets a worker on KBYE; ours accepts both.
* Several router groups (``WORKER_ADDR="tcp://a:N,tcp://b:N;tcp://c:N"``,
  shards with a leader and a journal each): one link per group
  (:class:`~.link.RouterLink`, its own session, credit, heartbeats and
  reconnect), every queue served on each. A job's outcome goes back over the
  link it came from. Every link may hold credit for all the free slots, so
  jobs of a busy group are not kept waiting by an idle one: up to one READY
  per group beyond the slots may be answered at once (those jobs wait here
  for a child, as prefetched ones do).
* After a reconnect (to another router of a group after a failover, or to the
  same one) the jobs we hold are named in our FEATURES answer (``holding``),
  and their outcomes go as DONE as they end. A router that hands one of them
  out to us again before it ends (it recovered the job as waiting) gets no
  second run: the REQUEST is dropped and the first run's DONE answers it.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass
from functools import partial

from django_eventmq.errors import InvalidJob
from django_eventmq.jobmanager.credit import Credit
from django_eventmq.jobmanager.lifecycle import Lifecycle
from django_eventmq.jobmanager.link import RouterLink
from django_eventmq.jobmanager.managed_job import ManagedJob
from django_eventmq.jobmanager.outcomes import Recorder
from django_eventmq.jobmanager.pool import Pool
from django_eventmq.jobmanager.shutdown import Shutdown
from django_eventmq.jobmanager.supervision import Supervision
from django_eventmq.protocol import (
    Cancel,
    Disconnect,
    Kbai,
    Message,
    Queued,
    Reject,
    Request,
    new_msgid,
    parse_job,
)
from django_eventmq.protocol.features import TROUBLE
from django_eventmq.protocol.headers import attempt_of
from django_eventmq.protocol.status import JobStatus
from django_eventmq.protocol.transitions import JobManagerState
from django_eventmq.runtime import registry, transport
from django_eventmq.runtime.addresses import parse_groups
from django_eventmq.runtime.logs import job_debug
from django_eventmq.runtime.service import Service
from django_eventmq.runtime.settings import Settings

logger = logging.getLogger("django_eventmq.jobmanager")

#: Seconds between two QUEUED messages naming the jobs we hold and have not
#: started: the router starts their leases again, so a lease (a job's timeout +
#: LEASE_GRACE, or JOB_LEASE) never runs out on a job waiting here.
QUEUED_EVERY = 1.0

#: ``JobManager.mode`` for each session state (for logs and tests).
_MODES = {JobManagerState.EXTENDED: "done", JobManagerState.REFERENCE: "reference"}


@dataclass(frozen=True, slots=True)
class _HeldDone:
    """A finished job's outcome, waiting (in the session) for a connection whose mode is known."""

    job: ManagedJob
    status: JobStatus
    payload: str  # the reply payload


@dataclass(frozen=True, slots=True)
class _HeldNack:
    """An unstarted job to hand back, waiting like :class:`_HeldDone`.

    A type of its own, not a status word: "nack" is no DONE status. Released,
    it goes out as NACK to our router; to a reference router it is no message
    at all (the job runs here).
    """

    job: ManagedJob
    reason: str


#: What the job manager holds in the session until the mode is settled.
_Held = _HeldDone | _HeldNack


class JobManager(Service):
    """Runs jobs from one router in a pool of worker processes.

    Its parts, each an object of its own: the :class:`.lifecycle.Lifecycle` of the
    jobs, the :class:`.pool.Pool` of children, one :class:`.link.RouterLink` per
    router group, the :class:`.credit.Credit` offered to them, the
    :class:`.supervision.Supervision` of the children and the :class:`.shutdown.Shutdown`.

    Run with :meth:`run` (``runtime.service``: SIGTERM/SIGINT stop it, then
    :meth:`drain` hands back or finishes the jobs it holds and :meth:`close`
    stops the children and the socket) or step it with :meth:`loop_once`.
    """

    label = "jobmanager"
    log = logger

    def __init__(
        self, settings: Settings, *, hooks: str | None = None, name: str | None = None
    ) -> None:
        super().__init__()
        # A misspelt job module: refused here, not left to every worker that starts.
        registry.check_job_modules(settings.job_modules)
        self.settings = settings
        self.hooks = hooks
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.addr = settings.worker_addr
        #: The queues we announce (``settings.queue_names`` builds a tuple per call).
        self._queue_names = frozenset(settings.queue_names)
        #: The poll timeout of a turn: short enough to heartbeat on time (a
        #: retry or a partial falling due sooner shortens it, :meth:`_wait_ms`).
        self._timeout_ms = max(1, int(min(settings.heartbeat_interval / 4, 0.25) * 1000))
        self._poller = transport.FdPoller()
        self.pool = Pool(settings, hooks=hooks, watch=self._watch, unwatch=self._unwatch)
        #: How many jobs we take beyond the free processes (the pool times the jobs).
        self.prefetch = self.pool.prefetch
        self.recorder = Recorder(self.name)
        self.lifecycle = Lifecycle(
            settings,
            self.pool,
            self.recorder,
            report=self._report,
            nack=self._nack,
            router_retries=lambda: self.link.session.extended,
            partial=self._partial,
            retries_for=lambda job: self.links[job.link].session.extended,
            wake_supervisor=self._wake_supervisor,
        )
        self.jobs = self.lifecycle.jobs
        groups = parse_groups(settings.worker_addr, "WORKER_ADDR")
        #: One link per router group, in WORKER_ADDR's order (a job's ``link`` indexes it).
        self.links: list[RouterLink[_Held]] = [
            RouterLink(settings, self._poller, partial(self._holding, index), addresses=members)
            for index, members in enumerate(groups)
        ]
        #: Per link: msgids of the jobs we held when its current connection was made.
        self._held_at_connect: list[set[str]] = [set() for _ in groups]
        self._next_queued = 0.0
        self._started = False
        stopping = self._is_stopping
        self.credit = Credit(self.pool, self.jobs, self.links, stopping)
        self.supervision = Supervision(
            settings,
            self.pool,
            self.lifecycle,
            self.credit,
            self.recorder,
            self.links,
            stopping=stopping,
            check_trouble=self._check_trouble,
        )
        #: ``(MIN, MAX)`` worker processes when autoscaling (AUTOSCALE), else None.
        self.autoscale = self.supervision.autoscale
        #: What the children run, told to the routers (emq_status --jobs).
        self.running = self.supervision.running
        self.shutdown = Shutdown(
            settings,
            self.lifecycle,
            self.links,
            turn=self.loop_once,
            wait_ms=self._wait_ms,
            flush_records=partial(self._send_records, force=True),
        )
        self._saved_sighup: object = None

    # -- lifecycle (run(), stop() and stopping come from Service) ---------------
    def start(self, now: float | None = None) -> None:
        """Start the worker children and connect to the router."""
        now = time.monotonic() if now is None else now
        self.pool.respawn(now)
        queues = ",".join(f"{name}:{weight}" for weight, name in self.settings.queues)
        bounds = self.autoscale
        logger.info(
            "jobmanager ready: broker=%s queues=%s concurrency=%s pid=%d",
            self.addr,
            queues,
            self.pool.size if bounds is None else f"{bounds[0]}..{bounds[1]} (autoscale)",
            os.getpid(),
        )
        if threading.current_thread() is threading.main_thread():
            self._saved_sighup = signal.signal(signal.SIGHUP, self._on_sighup)
        self._connect(now)
        self._started = True

    def reload(self) -> None:
        """Ask for a warm restart (what SIGHUP does): new children with the job code
        imported afresh take new jobs; the old ones finish theirs, then exit.

        Only sets a flag: safe from a signal handler.
        """
        self.supervision.reload()

    def _on_sighup(self, signum: int, frame: object) -> None:
        self.reload()

    def drain(self) -> None:
        """Once stop was asked: hand back or finish the jobs we hold, then say goodbye."""
        self.shutdown.drain(self._timeout_ms)

    def close(self) -> None:
        """Stop the children and close the socket (idempotent; also after a failed start)."""
        self.pool.close()
        for link in self.links:
            link.close()
        saved, self._saved_sighup = self._saved_sighup, None
        if saved is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGHUP, saved)  # type: ignore[arg-type]

    # -- the loop --------------------------------------------------------------
    def loop_once(self, timeout_ms: int | None = None, now: float | None = None) -> None:
        """Wait up to ``timeout_ms`` for messages and results, then handle them.

        Without ``timeout_ms``: the turn's own timeout (:meth:`_wait_ms`), as
        :meth:`run` uses it; tests pass one (and ``now``).
        """
        if not self._started:
            self.start(now)
        if timeout_ms is None:
            timeout_ms = self._wait_ms(self._timeout_ms)
        events = self._poller.poll(timeout_ms)
        now = time.monotonic() if now is None else now
        supervision = self.supervision
        self.credit.turn_at = now
        if supervision.reload_asked and not self.stopping:
            supervision.supervise(now)  # before this turn hands a job to an old child
        lifecycle, children = self.lifecycle, self.pool.children
        router_ready = finished = False
        # Results first: their DONE/READY lets the router send the next job
        # while we read what it already sent.
        for fd, _ in events:
            if isinstance(fd, int):
                child = children.get(fd)
                if child is not None:
                    finished = lifecycle.receive(child, now) or finished
            else:
                router_ready = True
        if finished:
            self.credit.top_up()
            self._flush()  # the DONEs and READYs now: the router can hand out more
        if router_ready:
            self._read_router(now)
        dispatched = bool(lifecycle.pending)
        if dispatched:
            lifecycle.dispatch(now)
        if lifecycle.partials:
            lifecycle.partials.flush_due(now)
        if events and (router_ready or dispatched or not finished):
            # Not again when only results came: nothing since the top-up above
            # changed the jobs, the slots or the sessions (sending the turn and
            # its partials does not), so it would send nothing.
            self.credit.top_up()
        if now >= supervision.next_at:
            supervision.supervise(now)
        if self.recorder.waiting:
            self._send_records(now)
        if now >= self._next_queued:
            self._name_queued(now)
        self._keepalive(now)  # each link sends what waits before a HEARTBEAT
        self._flush()  # nothing this turn sent waits past its end

    def _name_queued(self, now: float) -> None:
        """QUEUED to each router that speaks it: the jobs of its group we hold and
        have not started (prefetched behind another, or waiting for a child)."""
        self._next_queued = now + QUEUED_EVERY
        for index, link in enumerate(self.links):
            if not link.session.router_speaks("queued"):
                continue
            waiting = tuple(
                job.msgid for job in self.jobs.values() if job.link == index and not job.began
            )
            if waiting:
                link.send(Queued(msgid=new_msgid(), job_msgids=waiting))

    def _flush(self) -> None:
        """Send what this turn sent so far to each router (one bundle each, see
        :meth:`.link.RouterLink.flush`)."""
        for link in self.links:
            link.flush()

    def _wait_ms(self, timeout_ms: int) -> int:
        """The poll timeout: shorter when a retry falls due sooner."""
        due = self.lifecycle.next_retry()
        partial_due = self.lifecycle.partials.next_due()
        if partial_due is not None and (due is None or partial_due < due):
            due = partial_due
        if due is None:
            return timeout_ms
        return max(0, min(timeout_ms, int((due - time.monotonic()) * 1000) + 1))

    @property
    def link(self) -> RouterLink[_Held]:
        """The link to the first (or only) router group."""
        return self.links[0]

    @property
    def mode(self) -> str:
        """How outcomes are reported on the first group's connection: "done",
        "reference", or "" (not yet)."""
        return _MODES.get(self.link.session.state, "")

    def _read_router(self, now: float) -> None:
        """Handle every message waiting on the router sockets (the session saw it first)."""
        for index, link in enumerate(self.links):
            state = link.session.state
            for message in link.messages(now):
                self._handle(message, now, index)
                if link.session.state is not state:
                    state = link.session.state
                    self._after_session_step(index)

    def _handle(self, message: Message, now: float, index: int = 0) -> None:
        if isinstance(message, Request):
            self._accept(message, index)
            if self.lifecycle.pending and self.links[index].quiet:
                # The last message waiting: to an idle child now, before the rest
                # of the turn. Not while more follow: a CANCEL among them must find
                # its job still pending, not running (that stops the worker).
                self.lifecycle.dispatch(now, idle_only=True)
        elif isinstance(message, Cancel):
            self.lifecycle.cancel(message.job_msgid, now)
        elif isinstance(message, Reject):  # a job whose death we reported is poisoned
            self.lifecycle.set_aside(message.job_msgid, message.reason, now)
        elif isinstance(message, Disconnect):
            self._lose_router(now, "the router sent DISCONNECT", index)
        elif isinstance(message, Kbai):
            self._lose_router(now, f"the router said {message.wire_command()}", index)
        # ACK, FEATURES, HEARTBEAT: the session's business.

    def _after_session_step(self, index: int = 0) -> None:
        """Once the mode is settled, send the outcomes that waited for it; then READY."""
        link = self.links[index]
        session = link.session
        if session.settled and session.held:
            logger.debug(
                "jobmanager reports to %s in %s mode",
                link.addr,
                _MODES.get(session.state, ""),
            )
            for item in session.take_held():
                if isinstance(item, _HeldNack):
                    self._nack(item.job, item.reason)
                else:
                    self._report(item.job, item.status, item.payload)
        self.credit.top_up()

    # -- jobs --------------------------------------------------------------------
    def _accept(self, request: Request, index: int = 0) -> None:
        headers, body = request.headers, request.body_text
        reply = headers.reply_requested
        job = ManagedJob(
            request.msgid,
            request.queue,
            request.body_text,
            reply,
            headers.timeout,
            headers.retry_count,
            attempt_of(headers),
            (reply or self.settings.record_all_results) and self.pool.can_record is not False,
        )
        job.link = index
        job.headers = headers  # parsed once and cached: the features' stages read it
        self.lifecycle.stats.received[job.queue] += 1
        job_debug(logger, "received, attempt %d", job.msgid, job.queue, job.attempt, body=body)
        if self._held_at_connect[index] and self._runs_here(request.msgid, index):
            return
        if self.stopping and self.links[index].session.extended:
            self._nack(job, "stopping")
            return
        trouble = self.credit.trouble
        if trouble and self.links[index].session.extended:
            self._nack(job, trouble)  # sent before it heard we take none
            return
        if request.queue not in self._queue_names:
            logger.debug(
                "job for queue %r that we do not serve: msgid=%s; running it",
                request.queue,
                request.msgid,
            )
        if self.settings.queue_allowed_jobs and not self._allowed_on_queue(job):
            return
        self.lifecycle.accept(job)

    def _holding(self, index: int = 0) -> list[str]:
        """The msgids of the jobs of group ``index`` we hold and have not reported
        (for a new connection to that group): those running or waiting here, and
        those finished while no router was connected, whose outcome waits to go."""
        msgids = [job.msgid for job in self.jobs.values() if job.link == index]
        self._held_at_connect[index] = set(msgids)
        msgids += [
            item.job.msgid
            for item in self.links[index].session.peek_held()
            if isinstance(item, _HeldDone)
        ]
        return msgids

    def _runs_here(self, msgid: str, index: int = 0) -> bool:
        """A REQUEST for a job we held at the reconnect and still hold: not a second run."""
        held = self._held_at_connect[index]
        if msgid not in held:
            return False
        if not any(job.msgid == msgid for job in self.jobs.values()):
            held.discard(msgid)  # reported before: a new attempt
            return False
        logger.info(
            "job msgid=%s handed out again by %s while it runs here: not run twice, "
            "its DONE answers both",
            msgid,
            self.links[index].addr,
        )
        return True

    def _allowed_on_queue(self, job: ManagedJob) -> bool:
        """Check ``QUEUE_ALLOWED_JOBS``; a refused job is answered ``refused`` here.

        Checked before a child sees the job, so a refused one never runs. A body
        that does not parse passes: the child refuses it with the parse error.
        """
        s = self.settings
        try:
            body = parse_job(job.body_text, max_depth=s.max_json_depth, max_bytes=s.max_body_bytes)
        except InvalidJob:
            return True
        if registry.allowed_on_queue(body.name, job.queue, s.queue_allowed_jobs):
            return True
        self.lifecycle.refuse(
            job,
            body.name,
            f"job {body.name!r} is not allowed on queue {job.queue!r} (QUEUE_ALLOWED_JOBS); "
            "refusing to run it",
            time.monotonic(),
        )
        return False

    def _report(self, job: ManagedJob, status: JobStatus, payload: str) -> None:
        """Tell the router the job came from that it is over, as that connection's mode says."""
        link = self.links[job.link]
        session = link.session
        if session.extended:
            link.send(session.done(job.msgid, status, payload))  # frees the slot
        elif session.state is JobManagerState.REFERENCE:
            if job.reply_requested:
                link.send(session.reply(job.msgid, payload))
        else:
            session.hold(_HeldDone(job, status, payload))

    def _partial(self, job: ManagedJob, payload: str) -> None:
        """A running job's partial: to a router that speaks PARTIAL, for a client that waits.

        Not kept while disconnected or in reference mode: partials are best effort.
        """
        link = self.links[job.link]
        partial = link.session.partial(job.msgid, payload) if job.reply_requested else None
        if partial is not None:
            link.send(partial)

    def _nack(self, job: ManagedJob, reason: str) -> None:
        """Give an unstarted job back to the router (or run it, if the router cannot take it)."""
        link = self.links[job.link]
        session = link.session
        if session.extended:
            link.send(session.nack(job.msgid, reason))  # frees the slot
        elif session.state is JobManagerState.REFERENCE:
            job.skip = ""
            self.lifecycle.accept(job)  # a reference router cannot take it back
        else:
            session.hold(_HeldNack(job, reason))

    def _check_trouble(self) -> None:
        """While no worker process can start, take no jobs and give back those held
        (a router of ours runs them elsewhere), and tell the routers why (STATUS
        shows it); once one is up, take jobs again."""
        trouble = self.pool.trouble
        if trouble == self.credit.trouble:
            return
        self.credit.trouble = trouble
        for link in self.links:
            features = link.session.restate(TROUBLE, trouble)
            if features is not None:
                link.send(features)
        self.credit.top_up()  # UNREADY first: the slots the NACKs free are not offered again
        if not trouble:
            logger.info("a worker process is up: jobmanager takes jobs again")
            return
        links = self.links
        given = self.lifecycle.hand_back_waiting(
            trouble, lambda job: links[job.link].session.extended
        )
        logger.error(
            "jobmanager takes no jobs: %s; handed back %d job(s) to the router", trouble, given
        )

    # -- records -----------------------------------------------------------------
    def _send_records(self, now: float, *, force: bool = False) -> None:
        """Hand due batches of outcome records to a child (they need Django)."""
        if self.pool.can_record is False:
            self.recorder.clear()  # the hooks module has no record_results
        else:
            self.recorder.flush(self.pool.send_records, now, force=force)

    # -- router connection ---------------------------------------------------------
    @property
    def connected(self) -> bool:
        """Every link's INFORM was ACKed (one group: its router's)."""
        return all(link.connected for link in self.links)

    def _connect(self, now: float) -> None:
        for link in self.links:
            link.connect(now)  # a new session: the previous router's view of us is gone

    def _lose_router(self, now: float, why: str, index: int = 0) -> None:
        self.links[index].lose(now, why)

    def _keepalive(self, now: float) -> None:
        """Heartbeat, reconnect, and settle the mode if FEATURES did not come."""
        for index, link in enumerate(self.links):
            link.keepalive(now)
            session = link.session
            if session.state is JobManagerState.DECIDING:
                session.tick(now)
                if session.settled:
                    self._after_session_step(index)

    # -- poller bookkeeping ----------------------------------------------------------
    def _watch(self, fd: int) -> None:
        self._poller.register(fd, transport.POLLIN)

    def _unwatch(self, fd: int) -> None:
        self._poller.unregister(fd)
        self.supervision.wake()  # reap it promptly

    def _wake_supervisor(self) -> None:
        self.supervision.wake()

    def _is_stopping(self) -> bool:
        return self.stopping

    # -- credit ------------------------------------------------------------------------
    @property
    def slots(self) -> int:
        """Jobs we take at once (:attr:`.credit.Credit.slots`)."""
        return self.credit.slots
