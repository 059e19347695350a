"""The job manager: takes jobs from the router and runs them in worker children.

One DEALER socket to the router's backend and one pipe per worker child
(:mod:`.pool`), all waited on by one ``zmq.Poller``. The job manager announces
``concurrency + prefetch`` free slots with READY, hands each REQUEST to the
least busy child, sends the result back as REPLY when the client asked for
one, and announces the freed slot. It heartbeats, reconnects with back-off
when the router goes quiet, and stops gracefully on SIGTERM.

Choices worth knowing:

* READY is sent after the router ACKs our INFORM: the reference router drops a
  READY from a worker it does not know.
* A REQUEST for a queue we did not announce is run anyway (the registry still
  decides whether it may run); the router chose us, and dropping it would lose
  the job.
* We say goodbye with the ``KBYE`` spelling of KBAI: the reference router only
  forgets a worker on KBYE; ours accepts both.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import zmq

from ..errors import ProtocolError
from ..protocol import (
    Ack,
    Disconnect,
    Heartbeat,
    Inform,
    Kbai,
    Liveness,
    Message,
    Ready,
    Reply,
    Request,
    decode_json,
    encode_json,
    new_msgid,
)
from ..protocol import constants as C
from . import transport, worker
from .pool import Child, Lost, Pool, Status
from .settings import Settings

logger = logging.getLogger("django_eventmq.jobmanager")

#: First reconnect delay in seconds; doubles per failed attempt up to
#: ``RECONNECT_MAX_DELAY``.
RECONNECT_MIN_DELAY = 0.1

#: Seconds between supervision passes (reap / check / respawn) when nothing
#: prompts one sooner.
SUPERVISE_EVERY = 0.2


@dataclass(slots=True)
class Job:
    """A job this job manager accepted and has not finished."""

    msgid: str
    queue: str
    body_text: str
    reply_requested: bool
    child: Child | None = None


def error_payload(exc_type: str, message: str, traceback: str = "") -> str:
    """The REPLY payload for a job that failed.

    The reference job manager answers a failed job with ``{"value": str(exc)}``,
    which its clients cannot tell from a result. We keep that ``value`` so a
    reference client sees what it always saw, and add ``error`` with the type,
    message and traceback so our client can raise :class:`JobError`.
    """
    return encode_json(
        {"value": message, "error": {"type": exc_type, "message": message, "traceback": traceback}}
    )


class JobManager:
    """Runs jobs from one router in a pool of worker processes."""

    def __init__(self, settings: Settings, *, hooks: str | None = None) -> None:
        self.settings = settings
        self.hooks = hooks
        self.addr = settings.worker_addr
        self.slots = settings.concurrency + settings.prefetch
        self._stopping = False
        self._poller = zmq.Poller()
        self.pool = Pool(settings, hooks=hooks, watch=self._watch, unwatch=self._unwatch)
        self.channel: transport.Channel | None = None
        self.connected = False  # our INFORM was ACKed on the current socket
        self.jobs: dict[int, Job] = {}
        self._pending: deque[int] = deque()  # accepted, waiting for a free child
        self._seq = 0
        self._credit = 0  # READYs the router holds for us on this socket
        self._outbox: list[Message] = []  # replies made while we had no socket
        self._inform_msgid = ""
        self._liveness: Liveness | None = None
        self._heard_any = False
        self._backoff = RECONNECT_MIN_DELAY
        self._reconnect_at: float | None = None
        self._next_supervise = 0.0
        self._started = False

    # -- lifecycle -------------------------------------------------------------
    def stop(self) -> None:
        """Ask the job manager to stop (safe to call from a signal handler)."""
        self._stopping = True

    @property
    def stopping(self) -> bool:
        return self._stopping

    def start(self, now: float | None = None) -> None:
        """Start the worker children and connect to the router."""
        now = time.monotonic() if now is None else now
        self.pool.respawn(now)
        queues = ",".join(f"{name}:{weight}" for weight, name in self.settings.queues)
        logger.info(
            "jobmanager ready: broker=%s queues=%s concurrency=%d pid=%d",
            self.addr,
            queues,
            self.settings.concurrency,
            os.getpid(),
        )
        self._connect(now)
        self._started = True

    def run(self) -> None:
        """Serve until :meth:`stop` (or SIGTERM/SIGINT), then shut down gracefully."""
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda _signum, _frame: self.stop())
        self.start()
        try:
            timeout = max(1, int(min(self.settings.heartbeat_interval / 4, 0.25) * 1000))
            while not self._stopping:
                self.loop_once(timeout)
            self._drain(timeout)
        except transport.ContextTerminated:
            pass
        finally:
            self.close()

    def close(self) -> None:
        """Stop the children and close the socket (idempotent)."""
        self.pool.close()
        self._close_channel()

    # -- the loop --------------------------------------------------------------
    def loop_once(self, timeout_ms: int, now: float | None = None) -> None:
        """Wait up to ``timeout_ms`` for messages and results, then handle them."""
        if not self._started:
            self.start(now)
        channel = self.channel
        events = dict(self._poller.poll(timeout_ms))
        now = time.monotonic() if now is None else now
        if channel is not None and channel.socket in events:
            self._read_router(channel, now)
        for fd in events:
            child = self.pool.children.get(fd) if isinstance(fd, int) else None
            if child is not None:
                self._finish(self.pool.receive(child), now)
        if self._pending:
            self._dispatch()
        if now >= self._next_supervise:
            self._supervise(now)
        self._keepalive(now)

    def _read_router(self, channel: transport.Channel, now: float) -> None:
        """Handle every message waiting on the router socket."""
        while self.channel is channel:
            try:
                _identity, _frames, message = channel.recv(flags=zmq.NOBLOCK)
            except transport.Again:
                return
            except ProtocolError as exc:
                logger.warning("dropped a malformed message from the router: %s", exc)
                continue
            assert self._liveness is not None
            self._liveness.heard(now)
            self._heard_any = True
            self._handle(message, now)

    def _handle(self, message: Message, now: float) -> None:
        if isinstance(message, Request):
            self._credit = max(0, self._credit - 1)
            self._accept(message)
        elif isinstance(message, Ack):
            if message.ack_msgid == self._inform_msgid and not self.connected:
                self.connected = True
                self._backoff = RECONNECT_MIN_DELAY
                logger.info("jobmanager connected to %s", self.addr)
                for pending in self._outbox:
                    self._send(pending)
                self._outbox.clear()
                self._top_up()
        elif isinstance(message, Disconnect):
            self._lose_router(now, "the router sent DISCONNECT")
        elif isinstance(message, Kbai):
            self._lose_router(now, f"the router said {message.wire_command()}")
        elif isinstance(message, Heartbeat):
            pass  # heard() above is all a heartbeat does
        else:
            logger.debug("ignored %s from the router", message.command)

    # -- jobs --------------------------------------------------------------------
    def _accept(self, request: Request) -> None:
        if request.queue not in self.settings.queue_names:
            logger.debug(
                "job for queue %r that we do not serve: msgid=%s; running it",
                request.queue,
                request.msgid,
            )
        self._seq += 1
        self.jobs[self._seq] = Job(
            request.msgid, request.queue, request.body_text, request.headers.reply_requested
        )
        self._pending.append(self._seq)
        self._dispatch()

    def _dispatch(self) -> None:
        """Hand pending jobs to children that can take them."""
        pending, jobs, pool = self._pending, self.jobs, self.pool
        while pending:
            job = jobs[pending[0]]
            child = pool.pick(len(job.body_text) + 16)
            if child is None:
                return
            seq = pending.popleft()
            job.child = child
            try:
                pool.send(child, seq, job.msgid, job.body_text)
            except OSError:
                # The child died under us; reaping reports the job lost.
                self._next_supervise = 0.0
                return

    def _finish(self, results: list[tuple[int, str, str]], now: float) -> None:
        """Report finished jobs and announce the freed slots."""
        for seq, status, payload in results:
            job = self.jobs.pop(seq, None)
            if job is None:
                continue
            if status != worker.OK:
                self._report_failure(job, status, payload)
            elif job.reply_requested:
                self._send(Reply(msgid=new_msgid(), payload=payload, reply_to=job.msgid))
            if job.child is not None and job.child.status is Status.RETIRING:
                self._next_supervise = 0.0  # let it go and start its replacement now
        if results:
            self._top_up()

    def _report_failure(self, job: Job, status: str, payload: str) -> None:
        try:
            info: dict[str, Any] = decode_json(payload, "worker result")
        except ProtocolError:
            info = {"job": "?", "type": "Error", "message": payload, "traceback": ""}
        name, exc_type = info.get("job", "?"), info.get("type", "Error")
        message, trace = info.get("message", ""), info.get("traceback", "")
        if status == worker.REFUSED:
            logger.warning(
                "refused job msgid=%s job=%s queue=%s: %s", job.msgid, name, job.queue, message
            )
        else:
            logger.warning(
                "job failed msgid=%s job=%s queue=%s: %s: %s",
                job.msgid,
                name,
                job.queue,
                exc_type,
                message,
            )
            if trace:
                logger.debug("traceback of job msgid=%s:\n%s", job.msgid, trace)
        if job.reply_requested:
            reply = error_payload(exc_type, message, trace)
            self._send(Reply(msgid=new_msgid(), payload=reply, reply_to=job.msgid))

    def _report_lost(self, lost: Lost) -> None:
        job = self.jobs.pop(lost.seq, None)
        if job is None:
            return
        name = _job_name(job.body_text)
        message = f"worker process pid={lost.pid} exited with code {lost.exitcode} running it"
        logger.warning("job lost msgid=%s job=%s queue=%s: %s", job.msgid, name, job.queue, message)
        if job.reply_requested:
            reply = error_payload("WorkerDied", message)
            self._send(Reply(msgid=new_msgid(), payload=reply, reply_to=job.msgid))

    def _supervise(self, now: float) -> None:
        """Reap dead children, retire worn ones, start replacements."""
        self._next_supervise = now + SUPERVISE_EVERY
        pool = self.pool
        pool.check()
        lost = pool.reap(now)
        for item in lost:
            self._report_lost(item)
        if not self._stopping:
            pool.respawn(now)
        if lost:
            self._top_up()
        if self._pending:
            self._dispatch()

    # -- router connection ---------------------------------------------------------
    def _send(self, message: Message) -> None:
        channel = self.channel
        if channel is None or not self.connected:
            if isinstance(message, Reply):
                self._outbox.append(message)  # goes out once we are connected again
            return
        channel.send(message)
        assert self._liveness is not None
        self._liveness.sent(time.monotonic())

    def _top_up(self) -> None:
        """Send READY until the router holds one per free slot (not while stopping)."""
        if self._stopping or not self.connected:
            return
        free = self.slots - len(self.jobs)
        while self._credit < free:
            self._send(Ready(msgid=new_msgid()))
            self._credit += 1

    def _connect(self, now: float) -> None:
        channel = transport.Channel(
            transport.DEALER, connect=self.addr, identity=transport.new_identity("jm-")
        )
        self.channel = channel
        self._poller.register(channel.socket, zmq.POLLIN)
        self.connected = False
        self._credit = 0
        self._heard_any = False
        self._reconnect_at = None
        self._liveness = Liveness(
            now, interval=self.settings.heartbeat_interval, timeout=self.settings.heartbeat_timeout
        )
        inform = Inform(msgid=new_msgid(), queues=self.settings.queues, peer_type=C.PEER_WORKER)
        self._inform_msgid = inform.msgid
        channel.send(inform)

    def _close_channel(self) -> None:
        channel, self.channel = self.channel, None
        self.connected = False
        if channel is not None:
            self._poller.unregister(channel.socket)
            channel.close()

    def _lose_router(self, now: float, why: str) -> None:
        """Drop the socket and plan a reconnect with back-off."""
        if self._heard_any:
            logger.warning("lost the router at %s: %s; reconnecting", self.addr, why)
            self._backoff = RECONNECT_MIN_DELAY
        else:
            logger.debug("no answer from the router at %s: %s; retrying", self.addr, why)
        self._close_channel()
        self._reconnect_at = now + self._backoff
        self._backoff = min(self._backoff * 2, self.settings.reconnect_max_delay)

    def _keepalive(self, now: float) -> None:
        """Heartbeat, notice a silent router, and reconnect when it is time."""
        if self.channel is None:
            if self._reconnect_at is not None and now >= self._reconnect_at:
                self._connect(now)
            return
        liveness = self._liveness
        assert liveness is not None
        if liveness.expired(now):
            self._lose_router(now, f"silent for more than {self.settings.heartbeat_timeout}s")
        elif liveness.due(now):
            self.channel.send(Heartbeat(msgid=new_msgid(), timestamp=time.time()))
            liveness.sent(now)

    # -- shutdown ------------------------------------------------------------------
    def _drain(self, timeout_ms: int) -> None:
        """Let running jobs finish within the grace period, then say goodbye."""
        grace = self.settings.shutdown_grace
        self.loop_once(0)  # take in REQUESTs already delivered: the router counts them as ours
        if self.jobs:
            logger.info(
                "jobmanager stopping: waiting up to %ss for %d job(s)", grace, len(self.jobs)
            )
        deadline = time.monotonic() + grace
        while self.jobs and time.monotonic() < deadline:
            self.loop_once(timeout_ms)
        if self.jobs:
            logger.warning(
                "jobmanager stopping: grace period over, terminating jobs msgid=%s",
                ",".join(job.msgid for job in self.jobs.values()),
            )
        if self.channel is not None:
            try:
                self.channel.send(Kbai(msgid=new_msgid(), kbye=True), flags=zmq.NOBLOCK)
            except transport.ZMQError:
                logger.debug("could not send KBYE to the router")
        logger.info("jobmanager stopped")

    # -- poller bookkeeping ----------------------------------------------------------
    def _watch(self, fd: int) -> None:
        self._poller.register(fd, zmq.POLLIN)

    def _unwatch(self, fd: int) -> None:
        self._poller.unregister(fd)
        self._next_supervise = 0.0  # reap it promptly


def _job_name(body_text: str) -> str:
    try:
        spec = decode_json(body_text, "job body")[1]
        return f"{spec['path']}.{spec['callable']}"
    except Exception:
        return "?"
