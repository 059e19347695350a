"""A small, explicit supervisor of worker child processes.

One :class:`Child` record per process (pid, status, jobs run, jobs in
flight; :mod:`.child_handles`). The job manager drives it in separate steps: :meth:`Pool.reap`
collects children that exited, :meth:`Pool.check` retires children that ran
``MAX_JOBS_PER_CHILD`` jobs and finishes kills, :meth:`Pool.respawn` starts
replacements. Children are started with the ``spawn`` method so they inherit
no ZeroMQ context and no database connection, and live long, so the start-up
cost (~0.1 s) is paid rarely.

Each child has a pipe (:mod:`.pipe` frames) for jobs, one back for what it
says (results, partials, acknowledgements), and one for outcome records,
which a thread of the child writes while its job runs
(:class:`.worker_process.Recording`). They are plain one-way pipes, not a socketpair:
a small write or read costs about half as much in the kernel (no socket
buffer per message), on both sides, for every job. The job manager polls the
result pipe's file descriptor next to its socket, so a result is read the
moment it is written. Jobs for one child are queued with :meth:`Pool.assign`
and written together by :meth:`Pool.flush`. A child runs its jobs in order,
so the first job in :attr:`Child.inflight` is the running one; it started
when the result before it arrived (or when it was handed to an idle child).
The run times so measured adapt the job manager's prefetch
(:mod:`.prefetch`), which sets how many jobs one child may hold
(:attr:`Pool.depth`).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from multiprocessing.context import SpawnContext

from django_eventmq.jobmanager import pipe
from django_eventmq.jobmanager.child_handles import Child as Child
from django_eventmq.jobmanager.child_handles import Lost as Lost
from django_eventmq.jobmanager.child_handles import Status as Status
from django_eventmq.jobmanager.child_handles import Taken as Taken
from django_eventmq.jobmanager.pipe import frame, write_all
from django_eventmq.jobmanager.prefetch import Prefetch
from django_eventmq.jobmanager.start_failures import StartFailures
from django_eventmq.jobmanager.worker_process import child_main  # the child's entry point
from django_eventmq.protocol.status import NOT_RUN
from django_eventmq.runtime.settings import Settings

logger = logging.getLogger("django_eventmq.pool")

#: Bytes of job bodies queued in one child's pipe beyond the job it runs.
#: Well below the socket buffer of the pipe, so writing never blocks the loop.
PIPE_BUDGET = 32 * 1024

#: Bytes of outcome records that may wait in one child's records pipe.
RECORDS_BUDGET = 64 * 1024

#: Size asked for a records pipe (Linux; more than RECORDS_BUDGET, so writing
#: records never blocks the job manager even while the child's database is slow).
RECORDS_PIPE_SIZE = 256 * 1024

#: Seconds after which a child stopped mid-job that has not exited is sent SIGKILL again.
KILL_GRACE = 1.0

#: Seconds a child whose pipe closed unasked, or that said a job's non-daemon thread
#: still runs in it once it was done (which would hold it forever), gets before SIGKILL.
EXIT_GRACE = 3.0

#: Seconds a child told to exit gets before SIGKILL otherwise: exiting takes well under
#: one, but on a loaded machine (a reload starts new children meanwhile) it can take
#: seconds, and a child that is only slow is not to be killed.
SLOW_EXIT_GRACE = 30.0

#: Longest one reaping pass waits for children that just closed their pipe to exit
#: (the rest are seen at the next pass): it blocks the job manager's loop.
REAP_WAIT = 0.05


class Pool:
    """Worker children of one job manager."""

    def __init__(
        self,
        settings: Settings,
        *,
        hooks: str | None = None,
        watch: Callable[[int], None] | None = None,
        unwatch: Callable[[int], None] | None = None,
        start_method: str = "spawn",
        prefetch: Prefetch | None = None,
    ) -> None:
        self.settings = settings
        self.hooks = hooks
        #: Children to keep active: ``concurrency``, or between the AUTOSCALE bounds.
        self.size = settings.initial_workers
        self.max_jobs = settings.max_jobs_per_child
        #: The job manager's prefetch; the run times measured here adapt it.
        self.prefetch = prefetch or Prefetch.from_settings(settings)
        self._watch = watch or (lambda fd: None)
        self._unwatch = unwatch or (lambda fd: None)
        self._ctx: SpawnContext = multiprocessing.get_context(start_method)  # type: ignore[assignment]
        self.children: dict[int, Child] = {}  # by pipe fd
        #: Children that failed to start: the back-off before the next, and why.
        self.start_failures = StartFailures()
        #: A warm restart's children may still be here (:meth:`renewed_jobs`).
        self._renewing = False
        #: True/False once a child said whether the hooks record results.
        self.can_record: bool | None = None
        #: ``async def`` jobs the children run beside each other (they say at start-up),
        #: and how many at once per child (ASYNC_CONCURRENCY).
        self.async_names: frozenset[str] = frozenset()
        #: A child said which they are (before that, no job is known to be async).
        self.kinds_known = False
        self.async_limit = settings.async_concurrency

    # -- starting ----------------------------------------------------------
    def spawn(self, now: float | None = None) -> Child:
        """Start one child."""
        jobs_in, jobs_out = self._ctx.Pipe(duplex=False)
        results_in, results_out = self._ctx.Pipe(duplex=False)
        records_in, records_out = self._ctx.Pipe(duplex=False)
        with contextlib.suppress(AttributeError, OSError):  # Linux only; a bigger buffer
            fcntl.fcntl(records_out.fileno(), fcntl.F_SETPIPE_SZ, RECORDS_PIPE_SIZE)
        level = logging.getLogger().getEffectiveLevel()
        process = self._ctx.Process(
            target=child_main,
            args=(jobs_in, self.settings, self.hooks, level, records_in, results_out),
            name="emq-worker",
            daemon=True,
        )
        process.start()
        # The child's ends are its own: its exit shows as EOF on results_in.
        for end in (jobs_in, results_out, records_in):
            end.close()
        child = Child(
            process=process,
            conn=results_in,
            started=_now(now),
            records_conn=records_out,
            jobs_conn=jobs_out,
            idle_since=_now(now),
        )
        self.children[child.fd] = child
        self._watch(child.fd)
        logger.debug("started worker child pid=%d", child.pid)
        return child

    def active(self) -> list[Child]:
        """Children that are or will be taking jobs."""
        return [c for c in self.children.values() if c.status in (Status.STARTING, Status.UP)]

    def respawn(self, now: float | None = None) -> list[Child]:
        """Start children until ``concurrency`` are active (unless start-up keeps failing).

        While none is up, one at a time: children starting together share the CPU
        and all come up late (four on two cores: each after twice the time of one),
        so the first job would wait for all of them; and a start that fails fails once.
        """
        now = _now(now)
        started = []
        active = self.active()
        while len(active) < self.size and now >= self.start_failures.next_start:
            if active and not any(child.status is Status.UP for child in active):
                break  # the one starting comes up first (or fails)
            child = self.spawn(now)
            started.append(child)
            active.append(child)
        return started

    @property
    def trouble(self) -> str:
        """Why no child can run jobs ("" while one is up, or none failed to start yet)."""
        return self.start_failures.trouble

    def busy(self) -> int:
        """Active children running a job."""
        return sum(1 for c in self.active() if c.inflight)

    def resize(self, size: int) -> None:
        """Keep ``size`` children active from now on (respawn starts the missing ones)."""
        self.size = size
        self.prefetch.resize(size)

    def retire_idle(self, idle: float, keep: int, now: float | None = None) -> int:
        """Retire UP children idle for ``idle`` seconds, down to ``keep`` active; how many.

        A child with a job is never retired here. The size shrinks by as many.
        """
        now = _now(now)
        active = len(self.active())
        retired = 0
        for child in list(self.children.values()):
            if active - retired <= keep:
                break
            if child.status is Status.UP and not child.inflight and now - child.idle_since >= idle:
                child.status = Status.RETIRING  # check() tells it to exit
                retired += 1
        if retired:
            self.resize(max(keep, self.size - retired))
        return retired

    def renew(self) -> list[Child]:
        """Warm restart: every active child finishes the job it runs and exits; new ones
        (fresh imports of the job code) replace them at the next respawn. The old ones
        (the caller takes back the jobs queued behind their running one)."""
        old = self.active()
        for child in old:
            child.status = Status.RETIRING
            child.renewed = True
        self._renewing = self._renewing or bool(old)
        return old

    def renewed_jobs(self) -> int:
        """Jobs still held by children a warm restart replaced (their slots are not
        their successors': the job manager offers those again)."""
        if not self._renewing:  # the usual case, asked every turn: no look at each child
            return 0
        renewed = [c for c in self.children.values() if c.renewed]
        self._renewing = bool(renewed)
        return sum(len(c.inflight) for c in renewed)

    @property
    def depth(self) -> int:
        """Jobs one child may hold: the prefetch is spread over the children, so a
        child has its next job at hand when it finishes one."""
        return self.prefetch.depth

    # -- talking to children -----------------------------------------------
    def pick(self, size: int, concurrent: bool = False) -> Child | None:
        """The least busy child that can take a job of ``size`` bytes now, if any
        (``concurrent``: an async job, run beside ASYNC_CONCURRENCY others)."""
        best: Child | None = None
        depth = self.prefetch.depth
        if concurrent:
            depth += self.async_limit - 1
        for child in self.children.values():
            if child.status is not Status.UP:
                continue
            n = len(child.inflight)
            if n == 0:
                return child
            fits = n < depth and child.queued_bytes + size <= PIPE_BUDGET
            if fits and (best is None or n < len(best.inflight)):
                best = child
        return best

    def pick_idle(self, size: int = 0, concurrent: bool = False) -> Child | None:
        """A child that runs no job and can take one now, if any (``size``: as for
        :meth:`pick`; one job always fits an idle child)."""
        for child in self.children.values():
            if child.status is Status.UP and not child.inflight:
                return child
        return None

    def assign(
        self,
        child: Child,
        seq: int,
        msgid: str,
        body_text: str,
        now: float,
        soft_timeout: int | None = None,
        trace: bytes = b"",
        context: bytes = b"",
        concurrent: bool = False,
    ) -> bool:
        """Queue one job for ``child``; :meth:`flush` writes it. True if it starts
        at once (the child was idle, or it is an async job with room beside others).

        ``soft_timeout``: seconds after which the child raises
        ``SoftTimeLimitExceeded`` inside the job (the hard timeout is the
        lifecycle's to enforce). ``trace``: a traced job's carrier (runtime/tracing.py);
        ``context``: its context line (runtime/job_context.py).
        ``concurrent``: an async job, run beside others (:mod:`.tasks`).
        """
        data = frame(pipe.encode_job(seq, body_text, soft_timeout, trace, context, concurrent))
        idle = not child.inflight
        if idle:
            size = 0
            child.head_since = now
        else:
            size = len(data)
            child.queued_bytes += size
        child.inflight[seq] = (msgid, size)
        child.outgoing.append(data)
        child.assigned += 1
        if self.max_jobs and child.assigned >= self.max_jobs:
            child.status = Status.RETIRING
        if concurrent:
            child.concurrent.add(seq)
            return bool(child.start_tasks(now, self.async_limit))
        return idle

    def send(
        self,
        child: Child,
        seq: int,
        msgid: str,
        body_text: str,
        soft_timeout: int | None = None,
    ) -> None:
        """Hand one job to ``child`` now."""
        self.assign(child, seq, msgid, body_text, time.monotonic(), soft_timeout)
        self.flush(child)

    def flush(self, child: Child) -> None:
        """Write the frames queued for ``child`` in one go (OSError: it died)."""
        data = b"".join(child.outgoing) if len(child.outgoing) > 1 else child.outgoing[0]
        child.outgoing.clear()
        write_all(child.out_fd, data)

    def cancel(self, child: Child, seq: int) -> None:
        """Ask ``child`` to skip job ``seq`` if it has not started it."""
        with contextlib.suppress(OSError):  # if it died, reaping hands the job back
            write_all(child.out_fd, frame(b"C%d" % seq))

    def send_records(self, records: bytes) -> bool:
        """Give a records batch to a child: an idle one, else the one with the fewest.

        A busy child writes it at once too (in its records thread); False
        when no child can take it now (none up, or all past their budget).
        """
        best: Child | None = None
        for child in self.children.values():
            if child.status is not Status.UP or not child.can_record:
                continue
            if child.records_bytes + len(records) > RECORDS_BUDGET and child.records:
                continue
            if not child.inflight:
                best = child
                break
            if best is None or (child.records_bytes, len(child.inflight)) < (
                best.records_bytes,
                len(best.inflight),
            ):
                best = child
        if best is None or best.records_conn is None:
            return False
        try:
            write_all(best.records_conn.fileno(), frame(records))
        except OSError:
            return False
        best.records.append(records)
        best.records_bytes += len(records)
        return True

    def receive(self, child: Child, now: float | None = None) -> list[tuple[int, str, str]]:
        """Results waiting in ``child``'s pipe: ``[(seq, status, payload), ...]``.

        Partials read on the way are added to :attr:`Child.partials` (a job's
        partials are read before its result). Marks the child DEAD when its
        pipe has closed, and UP when it says so.
        """
        results: list[tuple[int, str, str]] = []
        if child.status is Status.KILLING:
            return results
        if not child.nonblocking and not child.readable.poll(0):
            return results
        try:
            frames = child.reader.read()
        except BlockingIOError:  # nothing waiting
            return results
        except (EOFError, OSError):
            self._mark_dead(child)
            return results
        inflight = child.inflight
        at = _now(now)
        for data in frames:
            kind = data[:1]
            if kind == pipe.RESULT:
                seq, status, payload = pipe.decode_result(data)
                entry = inflight.pop(seq, None)
                if child.concurrent and seq in child.concurrent:
                    # It ran beside others: its time is not the process's, so no
                    # measure for the prefetch.
                    child.forget(seq)
                elif entry is not None and status not in NOT_RUN:  # refused or skipped: not timed
                    # A result read together with the one before it ran in between: 0 s.
                    self.prefetch.observe(at - child.head_since)
                if entry is not None and entry[1]:
                    # A job queued behind the head, skipped (a cancel): its bytes left
                    # the pipe; the running job stays the head.
                    child.queued_bytes -= entry[1]
                elif entry is not None and inflight:
                    # The next job is now running, no longer queued in the pipe.
                    first = next(iter(inflight))
                    msgid, size = inflight[first]
                    child.queued_bytes -= size
                    inflight[first] = (msgid, 0)
                    child.head_since = at
                if not inflight:
                    child.idle_since = at
                child.jobs_run += 1
                results.append((seq, status, payload))
            elif kind == pipe.PARTIAL:
                try:
                    child.partials.append(pipe.decode_partial_frame(data))
                except ValueError:  # never from our child code; a bad report is not fatal
                    logger.warning("child %s sent a malformed partial report; dropped", child.pid)
            elif kind == pipe.RECORDED:
                if child.records:
                    child.records_bytes -= len(child.records.pop(0))
            elif kind == pipe.UP:
                self._up(child, data[1:])
            elif kind == pipe.FAIL:
                child.failure = data[1:].decode(errors="replace")
            elif kind == pipe.BYE:
                child.said_bye = True
                child.lingering = data[1:].decode(errors="replace")
                if child.lingering and child.exit_by:
                    child.exit_by = min(child.exit_by, at + EXIT_GRACE)
        if results and child.concurrent:
            child.start_tasks(at, self.async_limit)  # those that took the freed room
        return results

    def _up(self, child: Child, caps: bytes) -> None:
        if child.status is Status.STARTING:
            child.status = Status.UP
            logger.debug("worker child pid=%d up", child.pid)
        child.was_up = True
        caps, _, names = caps.partition(b"\n")
        child.can_record = pipe.CAN_RECORD in caps
        if names:  # every child imports the same job modules
            self.async_names = frozenset(names.decode().split("\n"))
        self.kinds_known = True
        self.can_record = child.can_record
        self.start_failures.up()

    def died(self) -> list[Child]:
        """Children that exited (or closed their pipe) unasked, not reaped yet; not
        those :meth:`kill` stopped (their jobs were settled then)."""
        return [
            child
            for child in self.children.values()
            if child.status is Status.DEAD and not child.kill_at
        ]

    def _mark_dead(self, child: Child) -> None:
        if child.status is not Status.DEAD:
            child.status = Status.DEAD
            self._stop_watching(child)

    def _stop_watching(self, child: Child) -> None:
        if child.watched:
            child.watched = False
            self._unwatch(child.fd)

    # -- stopping one child mid-job ------------------------------------------
    def kill(self, child: Child, now: float | None = None) -> Taken:
        """Stop ``child`` now (SIGKILL: children ignore SIGTERM, see ``child_main``).

        Its running job is the caller's to report; the jobs queued behind it
        and its unhandled records are handed back so nothing is lost.
        """
        running = [seq for seq in child.inflight if child.runs(seq)]
        queued = [seq for seq in child.inflight if not child.runs(seq)]
        taken = Taken(queued=queued, records=list(child.records), running=running)
        if child.inflight:  # a job that ran past its timeout (or was cancelled) ran this long
            self.prefetch.observe(_now(now) - child.head_since)
        child.inflight.clear()
        child.concurrent.clear()
        child.tasks.clear()
        child.records.clear()
        child.outgoing.clear()
        child.partials.clear()
        child.queued_bytes = child.records_bytes = 0
        child.status = Status.KILLING
        child.kill_at = _now(now) + KILL_GRACE
        self._stop_watching(child)
        with contextlib.suppress(OSError):
            os.kill(child.pid, signal.SIGKILL)
        return taken

    # -- supervising ---------------------------------------------------------
    def check(self, now: float | None = None) -> None:
        """Tell retiring children that are done to exit; finish kills; notice deaths."""
        for child in list(self.children.values()):
            if child.status is Status.RETIRING and not child.inflight:
                with contextlib.suppress(OSError):
                    write_all(child.out_fd, frame(pipe.EXIT))
                child.retired = True
                self._mark_dead(child)
            elif child.status is Status.KILLING:
                if child.process.exitcode is not None:
                    self._mark_dead(child)
                elif _now(now) >= child.kill_at:
                    child.process.kill()
            elif child.status is not Status.DEAD and child.process.exitcode is not None:
                self._mark_dead(child)

    def reap(self, now: float | None = None) -> list[Lost]:
        """Collect children that exited (SIGKILL those that do not within EXIT_GRACE);
        returns the jobs they still held."""
        lost: list[Lost] = []
        at = _now(now)
        wait_until = time.monotonic() + REAP_WAIT
        for fd, child in list(self.children.items()):
            if child.status is not Status.DEAD:
                continue
            if not child.exit_by:
                # Its pipe just closed, so it is exiting: wait a little (once, and
                # REAP_WAIT for all of them), else see it at a later pass.
                slow = child.retired and not child.lingering
                child.exit_by = at + (SLOW_EXIT_GRACE if slow else EXIT_GRACE)
                child.process.join(timeout=max(0.0, wait_until - time.monotonic()))
            if child.process.exitcode is None:
                if at >= child.exit_by:
                    self._force(child, at)
                continue
            del self.children[fd]
            child.close_pipes()
            code = child._exitcode = child.process.exitcode
            if not child.was_up and not child.retired:
                self.start_failures.failed(child, at)
            elif child.forced:  # warned when it was killed
                logger.debug("worker child pid=%d killed for not exiting, reaped", child.pid)
            elif child.kill_at or (child.retired and not child.inflight):
                logger.debug("worker child pid=%d stopped after %d jobs", child.pid, child.jobs_run)
            else:
                logger.warning(
                    "worker child pid=%d exited with code %s; replacing it", child.pid, code
                )
            lost.extend(
                Lost(seq=seq, msgid=msgid, pid=child.pid, exitcode=code, started=child.runs(seq))
                for seq, (msgid, _size) in child.inflight.items()
            )
            child.process.close()
        return lost

    def _force(self, child: Child, now: float) -> None:
        """SIGKILL a DEAD child that did not exit in its grace (again each KILL_GRACE)."""
        if not child.forced:
            child.forced = True
            held = f"; it held {len(child.inflight)} job(s)" if child.inflight else ""
            if child.lingering:
                # It said so itself as it finished: nothing else would end it.
                why = (
                    f"finished, but non-daemon thread(s) a job started ({child.lingering}) "
                    f"still ran in it {EXIT_GRACE:.1f}s later"
                )
            elif child.retired:
                done = "finished its work" if child.said_bye else "did not answer"
                why = f"was told to exit {SLOW_EXIT_GRACE:.0f}s ago and has not exited ({done})"
            else:
                why = f"closed its pipe {EXIT_GRACE:.1f}s ago and has not exited"
            logger.warning(
                "worker child pid=%d %s; killing it with SIGKILL%s", child.pid, why, held
            )
        child.exit_by = now + KILL_GRACE
        with contextlib.suppress(OSError):
            os.kill(child.pid, signal.SIGKILL)

    def orphan_records(self) -> list[bytes]:
        """Records batches held by children that died before handling them."""
        taken: list[bytes] = []
        for child in self.children.values():
            if child.status is Status.DEAD and child.records:
                taken.extend(child.records)
                child.records.clear()
                child.records_bytes = 0
        return taken

    # -- stopping ------------------------------------------------------------
    def close(self, timeout: float = 2.0) -> None:
        """Stop every child: ask politely, then kill (children ignore SIGTERM)."""
        children = list(self.children.values())
        for child in children:
            if child.status not in (Status.DEAD, Status.KILLING):
                with contextlib.suppress(OSError):
                    write_all(child.out_fd, frame(pipe.EXIT))
        deadline = time.monotonic() + timeout
        for child in children:
            if not child.inflight:
                child.process.join(max(0.0, deadline - time.monotonic()))
        for child in children:
            if child.process.exitcode is None:
                child.process.kill()
        for child in children:
            child.process.join(1.0)
            self._mark_dead(child)
            child.close_pipes()
        self.children.clear()


def _now(now: float | None) -> float:
    return time.monotonic() if now is None else now
