"""The worker child: a long-lived process that runs jobs the job manager hands it.

It talks to its job manager over two one-way pipes of length-prefixed frames
(:mod:`.pipe`, which says what each frame means), jobs in and what it says
out, instead of manager proxies, plus a pipe of outcome records that a
thread writes (:class:`Recording`). The child imports job modules once at
start-up; :class:`.job_runner.JobRunner` runs each job. A result is written
as soon as its job ends: the job manager times the next job from it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import select
import signal
import sys
import threading
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import Connection

from django_eventmq.jobmanager import invoke, progress, tasks
from django_eventmq.jobmanager.job_hooks import Hooks, load_hooks
from django_eventmq.jobmanager.job_runner import JobRunner
from django_eventmq.jobmanager.pipe import (
    ASYNC_JOB,
    BYE,
    CAN_RECORD,
    CANCEL,
    EXIT,
    FAIL,
    JOB,
    RECORDED,
    RECORDS,
    UP,
    FrameReader,
    decode_job_frame,
    encode_partial_frame,
    encode_result,
    frame,
    write_all,
)
from django_eventmq.protocol.status import JobStatus
from django_eventmq.runtime import registry
from django_eventmq.runtime.settings import Settings

logger = logging.getLogger("django_eventmq.worker")


def _not_ours(signum: int, frame: object) -> None:
    """A signal sent to the whole process group: the job manager's to act on."""


def child_main(
    conn: Connection,
    settings: Settings,
    hooks: str | None,
    log_level: int,
    records: Connection,
    results: Connection | None = None,
) -> None:
    """Entry point of a worker child (started with the ``spawn`` method).

    ``conn`` is the read end of the job pipe, ``results`` the write end of
    the pipe back (None: ``conn`` both ways), ``records`` the read end of
    the records pipe.
    """
    # Signals sent to the whole process group (Ctrl-C, systemd's KillMode=control-group
    # SIGTERM, a group-wide SIGHUP) are the job manager's to act on: it lets our job
    # finish, then tells us to exit, and SIGKILLs us when its grace is over. A handler
    # that does nothing, not SIG_IGN: a program a job starts gets the defaults back
    # (an ignored signal stays ignored in it: its terminate() would not work).
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _not_ours)
    fd = conn.fileno()
    out = fd if results is None else results.fileno()
    try:
        loaded = load_hooks(hooks)
        loaded.setup()
        if not logging.getLogger().handlers:
            # Spawned children start with no logging set up; the hooks (Django)
            # may have configured it, otherwise mirror the parent's level.
            logging.basicConfig(
                level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
            )
        registry.import_job_modules(settings.job_modules)
    except BaseException as exc:
        write_all(out, frame(FAIL + f"{type(exc).__name__}: {exc}".encode()))
        conn.close()
        sys.exit(1)
    runner = JobRunner(
        settings.allowed_job_modules,
        loaded,
        max_json_depth=settings.max_json_depth,
        max_body_bytes=settings.max_body_bytes,
    )
    can_record = loaded.record_results is not None
    limit = settings.async_concurrency
    # The async jobs this child runs beside each other: the job manager flags them.
    concurrent = "\n".join(registry.async_names()) if limit > 1 else ""
    up = UP + (CAN_RECORD if can_record else b"")
    write_all(out, frame(up + b"\n" + concurrent.encode() if concurrent else up))
    try:
        serve(fd, runner, records.fileno() if can_record else None, out, async_limit=limit)
    finally:
        invoke.close_loop()
        # What is left is exiting, which a job's non-daemon thread can hold up for
        # good: say which, so the job manager neither waits for it nor kills a
        # child that is only slow to exit.
        main = threading.main_thread()
        lingering = [t.name for t in threading.enumerate() if not t.daemon and t is not main]
        with contextlib.suppress(OSError):
            write_all(out, frame(BYE + ",".join(lingering).encode()))
        conn.close()
        if results is not None:
            results.close()


#: A job waiting in the child: (seq, soft time limit or None, body, trace carrier,
#: context line, runs beside other async jobs).
_Queued = tuple[bytes, int | None, bytes, bytes, bytes, bool]


def serve(
    fd: int,
    runner: JobRunner,
    records_fd: int | None = None,
    out_fd: int | None = None,
    *,
    async_limit: int = 1,
) -> None:
    """Run jobs arriving on ``fd`` until it closes or says exit; what we say
    goes to ``out_fd`` (None: ``fd`` too, a socket).

    Everything waiting in the pipe is read before each job starts, so a
    cancel for a queued job is seen before that job would run. Records
    batches arriving on ``records_fd`` are written meanwhile, by a thread.
    """
    out = fd if out_fd is None else out_fd
    # A thread a job started may still report while we write a result: one
    # writer at a time keeps the frames whole.
    writing = threading.Lock()

    def say(data: bytes) -> bool:
        try:
            with writing:
                write_all(out, frame(data))
        except OSError:
            return False
        return True

    def send(data: bytes) -> bool:
        # A soft time limit waits until the frame is whole (a job's progress report).
        with invoke.shield():
            return say(data)

    gate = progress.PartialGate(lambda seq, payload: send(encode_partial_frame(seq, payload)))
    recording = None
    if records_fd is not None:
        recording = Recording(records_fd, runner.hooks, send)
        recording.start()
    try:
        # A result is written once the job is over and its soft limit disarmed:
        # no shield needed (say, not send).
        concurrent = None
        if async_limit > 1:
            concurrent = tasks.AsyncJobs(
                runner.run_async, async_limit, say, encode_result, encode_partial_frame
            )
        _serve(fd, runner, gate, say, concurrent)
    finally:
        if recording is not None:
            recording.finish()


def _serve(
    fd: int,
    runner: JobRunner,
    gate: progress.PartialGate,
    send: Callable[[bytes], bool],
    concurrent: tasks.AsyncJobs | None = None,
) -> None:
    reader = FrameReader(fd)
    waiting = select.poll()
    waiting.register(fd, select.POLLIN)
    jobs: deque[_Queued | None] = deque()  # None: exit here
    # The read just made took in everything waiting: the next job starts without
    # asking the pipe again (a system call a job, when jobs come one at a time).
    drained = False
    while True:
        if concurrent is not None and concurrent.running:
            # Async jobs run: the next job starts only if it is async and there is
            # room; otherwise turn their loop until one ends or the job manager
            # writes (a job, a cancel). The pipe is read before each start.
            if not _can_start(jobs, concurrent):
                concurrent.wait(fd)
                if concurrent.broken:
                    return
            if waiting.poll(0):
                if not _read(reader, jobs, send, concurrent):
                    return
                continue
            if not _can_start(jobs, concurrent):
                continue
        elif not jobs or (not drained and waiting.poll(0)):
            if not _read(reader, jobs, send, concurrent):
                return
            drained = reader.drained
            continue
        drained = False
        item = jobs.popleft()
        if item is None:
            return
        seq, soft, body, trace, context, is_async = item
        if is_async and concurrent is not None:
            concurrent.start(seq, soft, body, trace, context)
            continue
        gate.start(seq)
        status, payload = runner.run(body, gate.report, soft, context, trace)
        gate.finish()
        if not send(encode_result(seq, status, payload)):
            return


def _read(
    reader: FrameReader,
    jobs: deque[_Queued | None],
    send: Callable[[bytes], bool],
    concurrent: tasks.AsyncJobs | None,
) -> bool:
    """Take in what the job manager wrote; False when the child should stop."""
    try:
        frames = reader.read()
    except (EOFError, OSError):
        return False  # the job manager went away
    return all(_take(data, jobs, send, concurrent) for data in frames)


def _can_start(jobs: deque[_Queued | None], concurrent: tasks.AsyncJobs | None) -> bool:
    """While async jobs run: the next job is async and there is room for it
    (a plain job, and the exit, wait until they are done)."""
    if not jobs:
        return False
    head = jobs[0]
    return head is not None and head[5] and concurrent is not None and concurrent.has_room()


def _take(
    data: bytes,
    jobs: deque[_Queued | None],
    send: Callable[[bytes], bool],
    concurrent: tasks.AsyncJobs | None = None,
) -> bool:
    """Handle one frame from the job manager; False when the child should stop."""
    kind = data[:1]
    if kind == JOB:
        if data[:2] == ASYNC_JOB:
            jobs.append((*decode_job_frame(data[1:]), True))
        else:
            jobs.append((*decode_job_frame(data), False))
    elif kind == CANCEL:
        seq = data[1:]
        for item in jobs:
            if item is not None and item[0] == seq:
                jobs.remove(item)
                return send(encode_result(seq, JobStatus.CANCELLED, ""))
        if concurrent is not None:
            concurrent.cancel(seq)  # a running async job: its task reports it
    elif kind == EXIT:
        jobs.append(None)
    else:
        logger.error("worker got an unknown frame from the job manager: %r", data[:40])
    return True


def _record(hooks: Hooks, text: bytes) -> None:
    """Pass a batch of outcome records to the hooks (a failure is logged, not fatal)."""
    if hooks.record_results is None:
        return
    try:
        records = json.loads(text)
        hooks.record_results(records)
    except Exception:
        logger.exception("record_results failed for a batch of %d byte(s)", len(text))


class Recording:
    """Writes the records batches that arrive on their own pipe, in a thread.

    The job manager's RUNNING and progress records must not wait until the
    child's job ends. ``finish`` writes what is already waiting when the child
    stops (it was sent before the child was told to), under the same lock, so
    one batch is never read by two threads; with a poll object of its own, as
    one may not be polled by two threads at once.
    """

    def __init__(self, fd: int, hooks: Hooks, send: Callable[[bytes], bool]) -> None:
        self._reader = FrameReader(fd)
        self._readable = select.poll()
        self._readable.register(fd, select.POLLIN)
        self._left = select.poll()
        self._left.register(fd, select.POLLIN)
        self._hooks = hooks
        self._send = send
        self._lock = threading.Lock()
        self._done = False
        self._thread = threading.Thread(target=self._run, name="emq-records", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while True:
            self._readable.poll()  # no GIL held while it waits
            with self._lock:
                if self._done or not self._take():
                    return

    def _take(self) -> bool:
        """Write the batches one read brings; False once the pipe closed."""
        try:
            frames = self._reader.read()
        except (EOFError, OSError):
            return False
        for data in frames:
            if data[:1] == RECORDS:
                _record(self._hooks, data[1:])
                if not self._send(RECORDED):
                    return False
        return True

    def finish(self) -> None:
        with self._lock:
            self._done = True
            while self._left.poll(0) and self._take():
                pass
