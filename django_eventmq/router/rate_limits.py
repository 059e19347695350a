"""Rate limits: at most N hand-outs per period, per queue and per rate key.

A queue's limit comes from the ``RATE_LIMITS`` setting; a job's from its
``rate-limit`` header, counted under its ``rate-key`` (``@job(rate_limit=)``
puts both on it), so every job of that name shares one limit whichever client
sent it and whichever job manager runs it. The router is the one place that
sees every hand-out, so it is the one that counts.

Each limit is a sliding log: the hand-out times of the last period, at most N
of them. A job may go out when its queue's log and its key's log each hold
fewer than N times from the last period; then both record it. So no period
(any window of that length, not only aligned ones) sees more than N
hand-outs of a limit.

What happens to a job that may not go out yet (see :mod:`.waiting`):

- its queue's limit is reached: the queue hands nothing out; the router wakes
  up when the oldest time of the log leaves the period (:attr:`RateLimits.wake`);
- its key's limit is reached: the job leaves the queue (other jobs of the
  queue go on) into :attr:`RateLimits.parked`, with the time at which it may
  go; :meth:`RateLimits.settle` stores it as delayed until then (:mod:`.delays`).
  Jobs of one key parked in a row are spread one period / N apart, so a flood
  of them comes back at the rate it may run, not all at once.

Counts live in memory only: a limit is configuration (settings, headers),
not state, and after a router restart each log starts empty.

Pure bookkeeping: time comes from an injected clock (monotonic seconds).
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter, deque
from collections.abc import Callable, Container, Iterable, Mapping
from typing import TYPE_CHECKING

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol.frame_fields import stored_request
from django_eventmq.protocol.headers import RATE_LIMIT_B, Rate, parse_rate, rate_of
from django_eventmq.runtime.logs import job_debug

if TYPE_CHECKING:
    from django_eventmq.router.waiting import RoutedJob

log = logging.getLogger("django_eventmq.router")

__all__ = ["PARK_BATCH", "PARK_MARGIN", "RateLimits", "SlidingLog", "queue_rates"]

#: Seconds added to a parked job's due time: the wall and monotonic clocks are read
#: apart, and a job promoted a hair early would be parked again at the back.
PARK_MARGIN = 0.002

#: Default of :attr:`RateLimits.park_batch`.
PARK_BATCH = 1000
#: Rate keys kept before idle ones are dropped.
PRUNE_KEYS = 1000


class SlidingLog:
    """The hand-out times of one limit within its last period (oldest first)."""

    __slots__ = ("rate", "times")

    def __init__(self, rate: Rate) -> None:
        self.rate = rate
        self.times: deque[float] = deque()

    def _trim(self, now: float) -> None:
        # ``t + period <= now``, as free_at() computes it (not ``t <= now - period``,
        # which rounds differently): a hand-out at free_at()'s time is then allowed.
        times, period = self.times, self.rate.period
        while times and times[0] + period <= now:
            times.popleft()

    def used(self, now: float) -> int:
        """Hand-outs counted in the period that ends ``now``."""
        self._trim(now)
        return len(self.times)

    def free_at(self, now: float) -> float:
        """When the next hand-out may happen (``now`` if it may now)."""
        self._trim(now)
        over = len(self.times) - self.rate.count
        return now if over < 0 else self.times[over] + self.rate.period

    def take(self, now: float) -> None:
        self.times.append(now)


def queue_rates(pairs: Iterable[tuple[str, str]]) -> dict[str, Rate]:
    """The ``RATE_LIMITS`` setting's ``(queue, "N/unit")`` pairs as rates (checked by
    the settings already)."""
    return {queue: parse_rate(text) for queue, text in pairs}


def job_rate(job: RoutedJob) -> tuple[str, Rate] | None:
    """``(rate-key, Rate)`` of a job's ``rate-limit`` header, read once from its header
    frame and kept on it; None without one."""
    found = job.rate
    if found is False:
        try:
            found = rate_of(stored_request(job.frames).headers)
        except ProtocolError:  # frames that are not a REQUEST's: not limited
            found = None
        job.rate = found
    return found


def _not_connected(job: RoutedJob, due: float) -> None:
    raise RuntimeError("RateLimits.connect() was not called: parked jobs have nowhere to go")


class RateLimits:
    """Every limit of one router: per queue (configured) and per rate key (seen on jobs)."""

    def __init__(
        self, queues: Mapping[str, Rate] | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.clock = clock
        self.queues: dict[str, SlidingLog] = {q: SlidingLog(r) for q, r in (queues or {}).items()}
        self.keys: dict[str, SlidingLog] = {}
        #: Jobs held back by their key's limit and the (clock) time each may go:
        #: taken out of their queue, for the book to store as delayed until then.
        self.parked: list[tuple[RoutedJob, float]] = []
        #: Parked jobs per queue, until they come due again (a count, not their ids: a
        #: flood of them costs no memory; see :meth:`unparked`).
        self.parked_by_queue: Counter[str] = Counter()
        #: When a queue at its own limit may hand out again (inf: none is).
        self.wake = math.inf
        #: Queues that found their limit reached since the last :meth:`due_queues`.
        self.at_limit: set[str] = set()
        #: Times a job was parked by its key's limit, per queue.
        self.throttled: Counter[str] = Counter()
        # Per key: when the next job parked in a row may go (spreads them out).
        self._next_park: dict[str, float] = {}
        #: Most jobs one pop parks: then it stops and the queue goes on at the next turn
        #: (each parked job is a journal write kept until the commit at the turn's end).
        self.park_batch = PARK_BATCH
        # Key count at which idle keys are dropped (doubles with the live ones).
        self._prune_at = PRUNE_KEYS
        # Where parked jobs go and the msgids gone meanwhile (:meth:`connect`).
        self._delay: Callable[[RoutedJob, float], None] = _not_connected
        self._gone: Container[str] = ()

    def limited(self, job: RoutedJob) -> bool:
        """True if a limit applies to ``job`` (its queue's or its own)."""
        return job.queue in self.queues or job_rate(job) is not None

    def queue_open(self, queue: str) -> bool:
        """False (and the router woken when it opens) if ``queue`` reached its limit."""
        log = self.queues.get(queue)
        if log is None:
            return True
        now = self.clock()
        at = log.free_at(now)
        if at <= now:
            return True
        self.at_limit.add(queue)
        self.wake = min(self.wake, at)
        return False

    def admit(self, job: RoutedJob) -> bool:
        """Count ``job`` as handed out now if its key's limit allows (its queue's was
        asked by :meth:`queue_open`); else park it and return False."""
        now = self.clock()
        found = job_rate(job)
        key_log = None
        if found is not None:
            key, rate = found
            key_log = self.keys.get(key)
            if key_log is None:
                if len(self.keys) >= self._prune_at:
                    self._prune(now)
                key_log = self.keys[key] = SlidingLog(rate)
            elif key_log.rate != rate:
                key_log.rate = rate  # the newest definition of the job wins
            at = key_log.free_at(now)
            if at > now:
                at = max(at, self._next_park.get(key, at))
                self._next_park[key] = at + rate.period / rate.count
                self.parked.append((job, at))
                self.parked_by_queue[job.queue] += 1
                self.throttled[job.queue] += 1
                return False
            key_log.take(now)
        queue_log = self.queues.get(job.queue)
        if queue_log is not None:
            queue_log.take(now)
        return True

    def _prune(self, now: float) -> None:
        """Drop the keys with no hand-out in their last period and no job parked ahead
        (keys made per customer, say, would otherwise pile up)."""
        for key, log in list(self.keys.items()):
            if not log.used(now) and self._next_park.get(key, now) <= now:
                del self.keys[key]
                self._next_park.pop(key, None)
        self._prune_at = max(PRUNE_KEYS, 2 * len(self.keys))

    def come_back(self, queue: str) -> None:
        """A pop parked :attr:`park_batch` jobs: ``queue`` goes on at the next turn."""
        self.at_limit.add(queue)
        self.wake = min(self.wake, self.clock())

    def settle(self, delay: Callable[[RoutedJob, float], None], gone: Container[str]) -> None:
        """The parked jobs wait as delayed (``delay(job, due)``, in the journal, so a
        flood of them costs no memory) until they may go; those whose msgid is in
        ``gone`` (cancelled meanwhile) are dropped."""
        parked, self.parked = self.parked, []
        wall, mono = time.time(), self.clock()
        for job, at in parked:
            if job.msgid in gone:
                self.unparked(job.queue)
                continue
            due = wall + (at - mono) + PARK_MARGIN
            delay(job, due)
            job_debug(log, "rate limit reached: waits %.3fs", job.msgid, job.queue, due - wall)

    def connect(self, delay: Callable[[RoutedJob, float], None], gone: Container[str]) -> None:
        """Where :meth:`on_settling` sends parked jobs (the book's delays, made after
        this) and the msgids gone meanwhile (:meth:`settle`)."""
        self._delay = delay
        self._gone = gone

    def on_settling(self) -> None:
        """The ``settling`` point (:mod:`.stages`): parked jobs wait as delayed."""
        if self.parked:
            self.settle(self._delay, self._gone)

    def unparked(self, queue: str, headers: bytes = RATE_LIMIT_B) -> None:
        """A delayed job of ``queue`` with these headers came due or was cancelled: if it
        has a ``rate-limit``, one parked job fewer is held back. (A retried job of a
        limited key waiting for its back-off looks the same: the count errs low, never
        below 0; after a restart it starts at 0.)"""
        if RATE_LIMIT_B in headers and self.parked_by_queue[queue] > 0:
            self.parked_by_queue[queue] -= 1

    def due_queues(self) -> list[str]:
        """The queues at their own limit whose wake time has come (then forgotten)."""
        now = self.clock()
        if now < self.wake:
            return []
        due = sorted(self.at_limit)
        self.at_limit.clear()
        self.wake = math.inf
        return due

    def wake_in(self) -> float | None:
        """Seconds until :meth:`due_queues` has something (None: no queue waits)."""
        if self.wake == math.inf:
            return None
        return max(0.0, self.wake - self.clock())

    def status(self, waiting: Mapping[str, int]) -> dict[str, dict[str, object]]:
        """Per queue with a limit or held-back jobs: its limit, the hand-outs counted in
        its current period, and how many jobs are held back now (``waiting``: jobs
        waiting per queue, all held back while the queue's limit is reached)."""
        now = self.clock()
        parked = self.parked_by_queue
        out: dict[str, dict[str, object]] = {}
        for queue in sorted({*self.queues, *(q for q, n in parked.items() if n)}):
            log = self.queues.get(queue)
            full = log is not None and log.free_at(now) > now
            out[queue] = {
                "limit": log.rate.text if log is not None else None,
                "used": log.used(now) if log is not None else 0,
                "held_back": parked[queue] + (waiting.get(queue, 0) if full else 0),
                "throttled": self.throttled[queue],
            }
        return out

    def keys_status(self) -> dict[str, dict[str, object]]:
        """Per rate key seen: its limit and the hand-outs counted in its current period."""
        now = self.clock()
        return {
            key: {"limit": log.rate.text, "used": log.used(now)}
            for key, log in sorted(self.keys.items())
        }
