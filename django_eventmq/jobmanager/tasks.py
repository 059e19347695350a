"""In a worker child: async jobs running at once on the child's event loop.

The job manager flags an ``async def`` job (``J*`` frame, :mod:`.pipe`), and
the child runs it as a task of its event loop (:func:`.invoke.event_loop`)
beside the other async jobs, at most ``ASYNC_CONCURRENCY`` at a time, in the
order they came. Each task is one job with its own soft limit
(``asyncio.timeout``), its own progress reports (a :class:`.progress.PartialGate`
of its own, found through :data:`.progress.task_reporter` in the task's
context) and its own cancel: ``C<seq>`` cancels that task only, which is also
how the job manager ends an async job past its hard ``timeout`` (killing the
process would end every other job on the loop). Each task writes its result
as it ends.

A plain job (and the exit) waits until the loop's tasks are done: it runs
in the child's main thread and would block them. The job manager mirrors
this rule to know which jobs run (:mod:`.pool`).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from typing import Any

from django_eventmq.jobmanager import invoke, progress
from django_eventmq.protocol.status import JobStatus

#: The job (seq) a task belongs to: tasks a job starts inherit it with its context.
_owner: contextvars.ContextVar[bytes] = contextvars.ContextVar("emq_job_seq", default=b"")

#: What the child writes a result or a partial with (False: the pipe is gone).
Say = Callable[[bytes], bool]
#: Encodes a result frame: ``(seq, status, payload)``.
EncodeResult = Callable[[bytes, str, str], bytes]
#: Encodes a partial frame: ``(seq, payload)``.
EncodePartial = Callable[[bytes, str], bytes]
#: Runs one async job body: ``(body, soft limit, context line, trace carrier)`` ->
#: ``(status, payload)``.
RunAsync = Callable[[bytes, float | None, bytes, bytes], Awaitable[tuple[JobStatus, str]]]


class AsyncJobs:
    """The async jobs a worker child runs now, as tasks of its event loop."""

    def __init__(
        self,
        run: RunAsync,
        limit: int,
        say: Say,
        encode_result: EncodeResult,
        encode_partial: EncodePartial,
    ) -> None:
        self._run_job = run
        self.limit = limit
        self._say = say
        self._encode_result = encode_result
        self._encode_partial = encode_partial
        self.loop = invoke.event_loop()
        #: Running jobs by seq.
        self.running: dict[bytes, asyncio.Task[tuple[JobStatus, str]]] = {}
        #: Jobs the job manager cancelled (each reported ``cancelled`` however it ends).
        self._cancelled: set[bytes] = set()
        #: A result could not be written: the job manager went away.
        self.broken = False

    def has_room(self) -> bool:
        return len(self.running) < self.limit

    def start(
        self, seq: bytes, soft: int | None, body: bytes, trace: bytes, context: bytes = b""
    ) -> None:
        """Start job ``seq`` as a task (it runs once :meth:`wait` turns the loop);
        ``context``: its context line (``current_job()`` in that task)."""
        task = self.loop.create_task(self._job(seq, soft, body, trace, context))
        self.running[seq] = task
        # A callback, not the coroutine's own end: a task cancelled before its first
        # step never runs a line of it, and must be reported all the same.
        task.add_done_callback(lambda done: self._ended(seq, done))

    def cancel(self, seq: bytes) -> bool:
        """Cancel running job ``seq``; False if it is not running here."""
        task = self.running.get(seq)
        if task is None:
            return False
        self._cancelled.add(seq)
        task.cancel("cancelled by the job manager")
        return True

    async def _job(
        self, seq: bytes, soft: int | None, body: bytes, trace: bytes, context: bytes
    ) -> tuple[JobStatus, str]:
        gate = progress.PartialGate(lambda s, payload: self._say(self._encode_partial(s, payload)))
        gate.start(seq)
        progress.task_reporter.set(gate.report)  # this task's context only
        _owner.set(seq)
        try:
            return await self._run_job(body, soft, context, trace)
        finally:
            gate.finish()  # its last partial goes before its result

    def _ended(self, seq: bytes, task: asyncio.Task[tuple[JobStatus, str]]) -> None:
        del self.running[seq]
        # Tasks the job started and left running end with it (they finish on the loop).
        for left in asyncio.all_tasks(self.loop):
            if left is not task and left.get_context().get(_owner) == seq:
                left.cancel()
        if task.cancelled() or seq in self._cancelled:
            # Cancelled, even if the job caught the cancel and returned.
            self._cancelled.discard(seq)
            status, payload = JobStatus.CANCELLED, ""
        else:
            status, payload = task.result()  # run_async never raises but to cancel
        if not self._say(self._encode_result(seq, status, payload)):
            self.broken = True

    def wait(self, fd: int) -> None:
        """Turn the loop until a job ends or ``fd`` (the job pipe) has something to read."""
        loop = self.loop
        readable: asyncio.Future[None] = loop.create_future()

        def ready() -> None:
            if not readable.done():
                readable.set_result(None)

        loop.add_reader(fd, ready)
        try:
            waits: list[asyncio.Future[Any]] = [readable, *self.running.values()]
            loop.run_until_complete(asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED))
        finally:
            loop.remove_reader(fd)
            readable.cancel()
