"""Per-queue high-water marks (``QUEUE_HIGH_WATER_MARK``, policy ``block``).

The global mark stops reading every client, since a ROUTER socket cannot
stop reading one. A queue's own mark instead withholds only the jobs sent to
that queue: the router reads on, and a new job for a queue at its mark
(waiting + delayed jobs) is withheld in memory, neither stored nor
acknowledged, behind the jobs withheld before it.
A sender that waits for its ACK (``guarantee``) therefore waits; jobs for
other queues, from the same client or any other, are stored and
acknowledged as usual. When the queue falls below 90% of its mark, withheld
jobs are accepted in the order they came (stored, then ACKed) until it
reaches the mark again.

At most ``QUEUE_WINDOW`` jobs are withheld per queue (a BATCH counts its
jobs; the last one withheld may pass the bound by the rest of its BATCH). A
job for a queue whose withheld jobs reached that bound is answered REJECT
with the reason,
as under policy ``reject``: a sender that never waits for its ACKs (the
reference client) cannot grow the router's memory, nor stop it reading the
other clients.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Callable

from django_eventmq.protocol.batch import jobs_at
from django_eventmq.protocol.frame_fields import BatchFields
from django_eventmq.router.book import Book
from django_eventmq.runtime.outbox import show
from django_eventmq.runtime.settings import Settings

log = logging.getLogger("django_eventmq.router")

#: What to do with a withheld message once its queue has room: ``replay(now)``.
Replay = Callable[[float], None]


class QueueMarks:
    """Jobs withheld per queue (see the module doc)."""

    def __init__(
        self, settings: Settings, book: Book, fatal: tuple[type[BaseException], ...]
    ) -> None:
        """``fatal``: exceptions a replay must not swallow (``Router.fatal``)."""
        self.settings = settings
        self.book = book
        self.fatal = fatal
        #: Per queue: (key, jobs, identity, replay), oldest first.
        self._withheld: dict[str, deque[tuple[str, int, bytes, Replay]]] = {}
        #: Jobs withheld per queue, and the msgids (BATCH: its msgid) withheld.
        self._withheld_jobs: Counter[str] = Counter()
        self._withheld_keys: set[str] = set()
        self._releasing = False

    def _queue_backlog(self, queue: str) -> int:
        """Waiting + delayed jobs of ``queue``."""
        waiting = self.book.routing.waiting.get(queue)
        return (waiting.count if waiting is not None else 0) + self.book.delays.delayed[queue]

    def queue_full(self, queue: str) -> bool:
        """A new job for ``queue`` must be withheld (its mark reached, or jobs withheld
        before it)."""
        mark = self.settings.queue_high_water_mark
        if not mark or self.settings.hwm_policy != "block":
            return False
        if queue in self._withheld and not self._releasing:
            return True  # behind the jobs withheld before it
        return self._queue_backlog(queue) >= mark

    def withhold(self, queue: str, key: str, jobs: int, identity: bytes, replay: Replay) -> bool:
        """Withhold a message for ``queue`` (False: over the bound, handle it now: the
        jobs of a full queue are then refused). A copy of a withheld one is dropped."""
        if key in self._withheld_keys:
            log.debug("%s from %s: held already (queue %s is full)", key, show(identity), queue)
            return True
        if self._withheld_jobs[queue] >= self.settings.queue_window:
            return False
        if queue not in self._withheld:
            self._withheld[queue] = deque()
            log.warning(
                "queue %s reached its high-water mark (%d jobs waiting): its new jobs are held "
                "unacknowledged until it is below %d; other queues are served as usual",
                queue,
                self._queue_backlog(queue),
                self._queue_low_water(),
            )
        self._withheld[queue].append((key, jobs, identity, replay))
        self._withheld_jobs[queue] += jobs
        self._withheld_keys.add(key)
        return True

    def withhold_batch(self, batch: BatchFields, ends: list[int], replay: Replay) -> bool:
        """Withhold a BATCH (``batch``: its fields, ``ends``: its jobs' bounds) whole if
        a queue of its jobs is full; False: handle it now."""
        if not self.settings.queue_high_water_mark or self.settings.hwm_policy != "block":
            return False
        identity, msgid, frame = batch
        queues = {queue for _msgid, queue, _headers, _body in jobs_at(frame, ends)}
        full = next((q.decode() for q in sorted(queues) if self.queue_full(q.decode())), None)
        if full is None:
            return False
        return self.withhold(full, msgid.decode(), len(ends) // 4, identity, replay)

    def refusal(self, queue: bytes, msgid: str) -> str | None:
        """The REJECT reason for a job of a queue that withholds all it may."""
        if not self._withheld or self._releasing:  # a withheld job now accepted is not refused
            return None
        name = queue.decode()
        if (
            name not in self._withheld
            or self._withheld_jobs[name] < self.settings.queue_window
            or msgid in self._withheld_keys  # a copy of a withheld one: not refused
            or self.book.is_held(msgid)
        ):
            return None
        return (
            f"queue {name} is over its high-water mark ({self.settings.queue_high_water_mark} "
            f"jobs waiting) and {self._withheld_jobs[name]} more wait to be accepted; "
            "send it again later"
        )

    def _queue_low_water(self) -> int:
        mark = self.settings.queue_high_water_mark
        return max(1, min(mark - 1, int(mark * 0.9)))

    def release(self, now: float) -> None:
        """Accept withheld jobs, oldest first, of each queue back below its low-water mark."""
        if not self._withheld:
            return
        mark = self.settings.queue_high_water_mark
        for queue in list(self._withheld):
            if self._queue_backlog(queue) >= self._queue_low_water():
                continue
            withheld = self._withheld[queue]
            released = 0
            self._releasing = True
            try:
                while withheld and self._queue_backlog(queue) < mark:
                    key, jobs, identity, replay = withheld.popleft()
                    self._withheld_jobs[queue] -= jobs
                    self._withheld_keys.discard(key)
                    released += jobs
                    try:
                        replay(now)
                    except self.fatal:
                        raise
                    except Exception:
                        log.exception(
                            "frontend: error accepting withheld %s from %s", key, show(identity)
                        )
            finally:
                self._releasing = False
            if not withheld:
                del self._withheld[queue]
                del self._withheld_jobs[queue]
                log.warning(
                    "queue %s is below its high-water mark again: its held jobs are accepted "
                    "(%d now)",
                    queue,
                    released,
                )

    def withheld_counts(self) -> dict[str, int]:
        """Jobs withheld per queue (MONITOR's ``held``)."""
        return {queue: n for queue, n in self._withheld_jobs.items() if n}
