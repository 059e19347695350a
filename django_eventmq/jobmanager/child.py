"""The worker child: a long-lived process that runs jobs the job manager hands it.

It talks to its job manager over two one-way pipes of length-prefixed frames
(:mod:`.pipe`), jobs in and what it says out, instead of manager proxies.
The child imports job modules once at start-up; a job that names anything
not registered with ``@job`` (or in ``ALLOWED_JOB_MODULES``) is refused and
never imported or run.

Frames, parent -> child (first byte says what):

- ``J<seq>\\n<job body JSON>``: run a job (several may come in one write);
  ``J<seq>:<seconds>\\n<job body JSON>`` with a soft time limit (the job's
  ``soft-timeout`` header; :mod:`.invoke` raises ``SoftTimeLimitExceeded``
  inside the job when it passes); a traced job's head ends with
  ``\\t<msgid>\\t<queue>\\t<traceparent>\\t<tracestate>`` (its ``run`` span's
  parent, :mod:`..runtime.tracing`); the head ends with ``\\x1e<context>``,
  what the job manager knows of the job (attempt, msgid, queue, headers:
  ``runtime.job_context.encode_line``, which never holds ``\\x1e`` or a line
  break), for ``current_job()`` and the job signals;
- ``J*<seq>...``: the same for an ``async def`` job, which runs beside other
  async jobs on the child's event loop (:mod:`.tasks`; at most
  ``ASYNC_CONCURRENCY`` at once, in the order they came; a plain job waits
  until they are done, and async jobs behind it wait for it);
- ``C<seq>``: cancel job ``seq`` if it has not started, or if it is an async
  job running on the loop (answered with a ``cancelled`` result; ignored
  when it already ran);
- ``X``: exit once the jobs before it are done.

Outcome records come on a pipe of their own, ``R<JSON list>`` frames for
``hooks.record_results``, each answered ``A`` on the pipe out. A thread of the
child writes them, so a record (a job's RUNNING row, its progress) never
waits for the job the child is running.

Child -> parent: ``U`` once ready (``Ur`` if the hooks module records
results; then, after a line break, the names of the registered ``async def``
jobs it runs concurrently, one a line), ``F<why>`` when start-up failed (then
it exits), ``A`` after a records batch, ``B<names>`` last, as it stops serving
(``names``: the non-daemon threads a job left running, which keep the process
from exiting; empty: none), ``P<seq>\\n<{"value": ...} JSON>`` for a partial a running
job reports (:mod:`.progress`; at most ``PARTIAL_RATE`` a second per job), and
per job ``D<seq>\\n<status>\\n<payload JSON>`` where status
is one of ``protocol.status.CHILD_STATUSES``: ``ok`` (payload is the reply
``{"value": ...}``), ``failed`` or ``refused``
(payload describes the error: ``{"job", "type", "path", "message", "traceback"}``) or
``cancelled`` (skipped, empty payload). A result is written as soon as its job
ends: the job manager times the next job from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import select
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from types import ModuleType
from typing import Any

from django_eventmq.errors import InvalidJob, JobNotAllowed, SerializationError
from django_eventmq.jobmanager import invoke, progress, tasks
from django_eventmq.jobmanager.pipe import FrameReader, frame, write_all
from django_eventmq.protocol import JobBody, encode_json, parse_job
from django_eventmq.protocol.payload import MAX_JSON_BYTES, MAX_JSON_DEPTH
from django_eventmq.protocol.status import JobStatus
from django_eventmq.runtime import job_context, job_events, registry, retry_policy, tracing
from django_eventmq.runtime.settings import Settings

logger = logging.getLogger("django_eventmq.worker")

# Frame kinds (first byte).
JOB = b"J"
#: How a ``J`` frame of an async job that runs beside others starts.
ASYNC_JOB = b"J*"
CANCEL = b"C"
RECORDS = b"R"
EXIT = b"X"
UP = b"U"
FAIL = b"F"
RESULT = b"D"
PARTIAL = b"P"
RECORDED = b"A"
BYE = b"B"
#: Before a job's context line, last in the head of its ``J`` frame.
CONTEXT = b"\x1e"
#: After UP: the hooks module has ``record_results``.
CAN_RECORD = b"r"


def _noop() -> None:
    return None


@dataclass(frozen=True, slots=True)
class Hooks:
    """The optional functions of a hooks module (missing ones do nothing)."""

    setup: Callable[[], object] = _noop
    before_job: Callable[[], object] = _noop
    after_job: Callable[[], object] = _noop
    #: Called with batches of outcome records; None when the module has none.
    record_results: Callable[[list[dict[str, Any]]], object] | None = None


def load_hooks(path: str | None) -> Hooks:
    """Import the hooks module at ``path`` and pick up its optional functions."""
    if not path:
        return Hooks()
    module: ModuleType = importlib.import_module(path)
    return Hooks(
        setup=getattr(module, "setup", _noop),
        before_job=getattr(module, "before_job", _noop),
        after_job=getattr(module, "after_job", _noop),
        record_results=getattr(module, "record_results", None),
    )


# -- frame codec (used by both sides) -------------------------------------------
def encode_job(
    seq: int,
    body_text: str,
    soft_timeout: int | None = None,
    trace: bytes = b"",
    context: bytes = b"",
    concurrent: bool = False,
) -> bytes:
    """A ``J`` frame; ``trace``: the trace carrier of a traced job (runtime/tracing.py);
    ``context``: its context line (``job_context.encode_line``); ``concurrent``: an
    async job, run beside others (``J*``)."""
    kind = ASYNC_JOB if concurrent else JOB
    head = b"%s%d:%d" % (kind, seq, soft_timeout) if soft_timeout else b"%s%d" % (kind, seq)
    if trace:
        head += b"\t" + trace
    return b"%s%s%s\n%s" % (head, CONTEXT if context else b"", context, body_text.encode())


def decode_job(data: bytes) -> tuple[bytes, int | None, bytes]:
    """``(seq, soft timeout or None, body)`` from a ``J`` frame."""
    return decode_traced_job(data)[:3]


def decode_traced_job(data: bytes) -> tuple[bytes, int | None, bytes, bytes]:
    """``(seq, soft timeout or None, body, trace carrier or b"")`` from a ``J`` frame."""
    return decode_job_frame(data)[:4]


def decode_job_frame(data: bytes) -> tuple[bytes, int | None, bytes, bytes, bytes]:
    """``(seq, soft timeout or None, body, trace carrier or b"", context line or b"")``
    from a ``J`` frame."""
    head, _, body = data[1:].partition(b"\n")
    head, mark, context = head.rpartition(CONTEXT)
    if not mark:  # no context: rpartition put it all last
        head, context = context, b""
    head, _, trace = head.partition(b"\t")
    seq, _, soft = head.partition(b":")
    return seq, int(soft) if soft else None, body, trace, context


def encode_result(seq: bytes, status: str, payload: str) -> bytes:
    return b"D%s\n%s\n%s" % (seq, status.encode(), payload.encode())


def encode_partial(seq: bytes, payload: str) -> bytes:
    return b"P%s\n%s" % (seq, payload.encode())


def decode_partial(data: bytes) -> tuple[int, str]:
    """``(seq, payload)`` from a child's ``P`` frame."""
    seq, payload = data[1:].split(b"\n", 1)
    return int(seq), payload.decode()


def decode_result(data: bytes) -> tuple[int, str, str]:
    """``(seq, status, payload)`` from a child's ``D`` frame."""
    seq, status, payload = data[1:].split(b"\n", 2)
    return int(seq), status.decode(), payload.decode()


def encode_records(records: list[dict[str, Any]]) -> bytes:
    return RECORDS + json.dumps(records, separators=(",", ":"), default=repr).encode()


# -- running one job ----------------------------------------------------------
class JobRunner:
    """Runs job bodies: parse, check the registry, call, encode the outcome."""

    def __init__(
        self,
        allowed_modules: tuple[str, ...] = (),
        hooks: Hooks | None = None,
        *,
        max_json_depth: int = MAX_JSON_DEPTH,
        max_body_bytes: int = MAX_JSON_BYTES,
    ) -> None:
        self.allowed_modules = allowed_modules
        self.hooks = hooks or Hooks()
        #: Bounds on the body (``MAX_JSON_DEPTH`` / ``MAX_BODY_BYTES``): a body past
        #: them is refused before it is parsed further.
        self.max_json_depth = max_json_depth
        self.max_body_bytes = max_body_bytes

    def run(
        self,
        body: bytes | str,
        report: Callable[[str], object] | None = None,
        soft_timeout: float | None = None,
        context: bytes = b"",
    ) -> tuple[JobStatus, str]:
        """Run one job; returns ``(status, payload JSON)``. Never raises.

        ``report`` takes each partial the job reports (:func:`.progress.progress`,
        or each value of a generator job, whose ``return`` value is the result).
        ``soft_timeout``: seconds after which ``SoftTimeLimitExceeded`` is raised
        inside the job (:mod:`.invoke`; async jobs run there too). ``context``: the
        job's context line (``current_job()`` while it runs).
        """
        prepared = self._prepare(body, context)
        if isinstance(prepared, tuple):
            return prepared
        token = job_context.enter(prepared.running)  # current_job() while it runs
        try:
            return self._call(prepared, report, soft_timeout)
        finally:
            job_context.leave(token)

    def _call(
        self,
        prepared: _Prepared,
        report: Callable[[str], object] | None,
        soft_timeout: float | None,
    ) -> tuple[JobStatus, str]:
        job, running = prepared.job, prepared.running
        events = job_events.listener  # None: nobody listens (the Django signals)
        try:
            self.hooks.before_job()
            progress.set_reporter(report)
            try:
                if events is not None:
                    events.started(running)
                value = invoke.call(prepared.func, job.args, job.kwargs, soft_timeout)
            finally:
                progress.set_reporter(None)
                self.hooks.after_job()
        except BaseException as exc:  # a job's SystemExit must not end the child
            if isinstance(exc, GeneratorExit):
                raise
            # KeyboardInterrupt too: children ignore SIGINT, so the job raised it
            # itself; it fails that job, as any exception does, not the child.
            return _failure(prepared, exc, events)
        return _success(prepared, value, events)

    async def run_async(
        self, body: bytes | str, soft_timeout: float | None = None, context: bytes = b""
    ) -> tuple[JobStatus, str]:
        """:meth:`run` for an async job on the running event loop, beside others
        (:mod:`.tasks`). A :class:`asyncio.CancelledError` (the job manager
        cancelled it) is raised: the caller reports it. Progress goes where
        :data:`.progress.task_reporter` says, in this task's context."""
        prepared = self._prepare(body, context)
        if isinstance(prepared, tuple):
            return prepared
        job, running = prepared.job, prepared.running
        events = job_events.listener
        # current_job(): set in this task's own context, so each job beside it
        # sees its own.
        token = job_context.enter(running)
        try:
            try:
                self.hooks.before_job()
                try:
                    if events is not None:
                        events.started(running)
                    value = await invoke.call_async(
                        prepared.func, job.args, job.kwargs, soft_timeout
                    )
                finally:
                    self.hooks.after_job()
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                if isinstance(exc, GeneratorExit):
                    raise
                return _failure(prepared, exc, events)
            return _success(prepared, value, events)
        finally:
            job_context.leave(token)

    def _prepare(self, body: bytes | str, context: bytes) -> _Prepared | tuple[JobStatus, str]:
        """The job ``body`` names, ready to call, or why it is not run."""
        name = "?"
        try:
            job = parse_job(body, max_depth=self.max_json_depth, max_bytes=self.max_body_bytes)
            name = job.name
            tracing.job_named(name)
            func = registry.resolve(job, self.allowed_modules)
        except (InvalidJob, JobNotAllowed) as exc:
            # Not run: the router's port must not be a remote code execution port.
            return JobStatus.REFUSED, _error_payload(name, exc, with_traceback=False)
        except Exception as exc:  # JobNotFound, or a class constructor that raised
            return JobStatus.FAILED, _error_payload(name, exc)
        return _Prepared(job, func, job_context.Running(context, job))


@dataclass(frozen=True, slots=True)
class _Prepared:
    job: JobBody
    func: Callable[..., Any]
    #: What current_job() gives while it runs, and what the signals carry.
    running: job_context.Running


def _failure(
    prepared: _Prepared, exc: BaseException, events: job_events.Listener | None
) -> tuple[JobStatus, str]:
    """A job that raised ``exc``: failed, with its retry policy's advice (known here
    only); ``events`` hear it failed for good or is to be retried (the job manager
    decides the same way, from the same advice: retry_policy.given_up)."""
    name = prepared.job.name
    advice = retry_policy.advice(name, exc, time.time())
    if events is not None:
        _failed(events, prepared.running, exc, advice)
    return JobStatus.FAILED, _error_payload(name, exc, retry=advice)


def _success(
    prepared: _Prepared, value: Any, events: job_events.Listener | None
) -> tuple[JobStatus, str]:
    name = prepared.job.name
    try:
        payload = encode_json({"value": value})
    except SerializationError as exc:
        error = SerializationError(f"return value of {name} is not JSON-serialisable: {exc}")
        if events is not None:
            _failed(events, prepared.running, error, {})
        return JobStatus.FAILED, _error_payload(name, error, with_traceback=False)
    if events is not None:
        events.succeeded(prepared.running, value)
    return JobStatus.OK, payload


def _failed(
    events: job_events.Listener,
    running: job_context.Running,
    exc: BaseException,
    advice: dict[str, Any],
) -> None:
    """Tell ``events`` the job failed: for good, or to be retried."""
    context = running.context()
    retry_count = context.headers.retry_count
    if retry_policy.given_up(context.attempt, retry_count, advice):
        events.failed(running, exc)
    else:
        events.retrying(running, exc)


def _error_payload(
    name: str,
    exc: BaseException,
    *,
    with_traceback: bool = True,
    retry: dict[str, Any] | None = None,
) -> str:
    text = "".join(traceback.format_exception(exc)) if with_traceback else ""
    kind = type(exc)
    tracing.job_failed(exc)  # its run span, if traced
    fields: dict[str, Any] = {
        "job": name,
        "type": kind.__name__,
        # The importable class (a Django task's TaskError.exception_class_path).
        "path": f"{kind.__module__}.{kind.__qualname__}",
        "message": str(exc),
        "traceback": text,
    }
    if retry:
        fields[retry_policy.ADVICE_KEY] = retry  # runtime/retry_policy.py: advice
    return encode_json(fields)


# -- the child process --------------------------------------------------------
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

    gate = progress.PartialGate(lambda seq, payload: send(encode_partial(seq, payload)))
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
                runner.run_async, async_limit, say, encode_result, encode_partial
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
        if trace:
            with tracing.running(trace):  # the job's run span
                status, payload = runner.run(body, gate.report, soft, context)
        else:  # untraced: no context manager to enter and leave
            status, payload = runner.run(body, gate.report, soft, context)
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
