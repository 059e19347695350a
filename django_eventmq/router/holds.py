"""Per-queue high-water marks (``QUEUE_HIGH_WATER_MARK``, policy ``block``).

A mixin of the router's frontend. The global mark stops reading every
client, since a ROUTER socket cannot stop reading one. A queue's own mark
instead holds back only the jobs sent to that queue: the router reads on,
and a new job for a queue at its mark (waiting + delayed jobs) is held in
memory, neither stored nor acknowledged, behind the jobs held before it.
A sender that waits for its ACK (``guarantee``) therefore waits; jobs for
other queues, from the same client or any other, are stored and
acknowledged as usual. When the queue falls below 90% of its mark, held jobs
are accepted in the order they came (stored, then ACKed) until it reaches
the mark again.

At most ``QUEUE_WINDOW`` jobs are held per queue (a BATCH counts its jobs;
the last one held may pass the bound by the rest of its BATCH). A job for a
queue whose held jobs reached that bound is answered REJECT with the reason,
as under policy ``reject``: a sender that never waits for its ACKs (the
reference client) cannot grow the router's memory, nor stop it reading the
other clients.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from django_eventmq.protocol.batch import jobs_at
from django_eventmq.protocol.views import BatchFields
from django_eventmq.router.book import Book
from django_eventmq.runtime.outbox import show
from django_eventmq.runtime.settings import Settings

log = logging.getLogger("django_eventmq.router")

#: What to do with a held message once its queue has room: ``replay(now)``.
Replay = Callable[[float], None]


class QueueMarks:
    """Jobs held back per queue (see the module doc); mixed into the frontend."""

    settings: Settings
    book: Book
    _sender: str | None
    #: Exceptions a handler must not swallow (see Router.fatal).
    fatal: tuple[type[BaseException], ...]

    if TYPE_CHECKING:

        def _fast_batch(self, batch: BatchFields, now: float) -> None: ...

    def _init_holds(self) -> None:
        #: Per queue: (key, jobs, identity, replay), oldest first.
        self._held: dict[str, deque[tuple[str, int, bytes, Replay]]] = {}
        #: Jobs held per queue, and the msgids (BATCH: its msgid) held.
        self._held_jobs: Counter[str] = Counter()
        self._held_keys: set[str] = set()
        self._releasing = False

    def _queue_backlog(self, queue: str) -> int:
        """Waiting + delayed jobs of ``queue``."""
        waiting = self.book.routing.waiting.get(queue)
        return (waiting.count if waiting is not None else 0) + self.book.delayed[queue]

    def queue_full(self, queue: str) -> bool:
        """A new job for ``queue`` must be held (its mark reached, or jobs held before it)."""
        mark = self.settings.queue_high_water_mark
        if not mark or self.settings.hwm_policy != "block":
            return False
        if queue in self._held and not self._releasing:
            return True  # behind the jobs held before it
        return self._queue_backlog(queue) >= mark

    def _hold(self, queue: str, key: str, jobs: int, identity: bytes, replay: Replay) -> bool:
        """Hold a message for ``queue`` (False: over the bound, handle it now: the
        jobs of a full queue are then refused). A copy of a held one is dropped."""
        if key in self._held_keys:
            log.debug("%s from %s: held already (queue %s is full)", key, show(identity), queue)
            return True
        if self._held_jobs[queue] >= self.settings.queue_window:
            return False
        if queue not in self._held:
            self._held[queue] = deque()
            log.warning(
                "queue %s reached its high-water mark (%d jobs waiting): its new jobs are held "
                "unacknowledged until it is below %d; other queues are served as usual",
                queue,
                self._queue_backlog(queue),
                self._queue_low_water(),
            )
        sender = self._sender

        def again(now: float) -> None:
            self._sender = sender  # the key it came with (CANCEL_POLICY owner)
            replay(now)

        self._held[queue].append((key, jobs, identity, again))
        self._held_jobs[queue] += jobs
        self._held_keys.add(key)
        return True

    def _hold_batch(self, batch: BatchFields, ends: list[int]) -> bool:
        """Hold a BATCH (``batch``: its fields, ``ends``: its jobs' bounds) whole if a
        queue of its jobs is full; False: handle it now."""
        if not self.settings.queue_high_water_mark or self.settings.hwm_policy != "block":
            return False
        identity, msgid, frame = batch
        queues = {queue for _msgid, queue, _headers, _body in jobs_at(frame, ends)}
        full = next((q.decode() for q in sorted(queues) if self.queue_full(q.decode())), None)
        if full is None:
            return False
        replay: Replay = lambda at: self._fast_batch(batch, at)  # noqa: E731
        return self._hold(full, msgid.decode(), len(ends) // 4, identity, replay)

    def _held_refusal(self, queue: bytes, msgid: str) -> str | None:
        """The REJECT reason for a job of a queue that holds all it may."""
        if not self._held or self._releasing:  # a held job now accepted is not refused
            return None
        name = queue.decode()
        if (
            name not in self._held
            or self._held_jobs[name] < self.settings.queue_window
            or msgid in self._held_keys  # a copy of a held one: held still, not refused
            or self.book.is_held(msgid)
        ):
            return None
        return (
            f"queue {name} is over its high-water mark ({self.settings.queue_high_water_mark} "
            f"jobs waiting) and {self._held_jobs[name]} more wait to be accepted; "
            "send it again later"
        )

    def _queue_low_water(self) -> int:
        mark = self.settings.queue_high_water_mark
        return max(1, min(mark - 1, int(mark * 0.9)))

    def release_held(self, now: float) -> None:
        """Accept held jobs, oldest first, of each queue back below its low-water mark."""
        if not self._held:
            return
        mark = self.settings.queue_high_water_mark
        for queue in list(self._held):
            if self._queue_backlog(queue) >= self._queue_low_water():
                continue
            held = self._held[queue]
            released = 0
            self._releasing = True
            try:
                while held and self._queue_backlog(queue) < mark:
                    key, jobs, identity, replay = held.popleft()
                    self._held_jobs[queue] -= jobs
                    self._held_keys.discard(key)
                    released += jobs
                    try:
                        replay(now)
                    except self.fatal:
                        raise
                    except Exception:
                        log.exception(
                            "frontend: error accepting held %s from %s", key, show(identity)
                        )
            finally:
                self._releasing = False
            if not held:
                del self._held[queue]
                del self._held_jobs[queue]
                log.warning(
                    "queue %s is below its high-water mark again: its held jobs are accepted "
                    "(%d now)",
                    queue,
                    released,
                )

    def held_counts(self) -> dict[str, int]:
        """Jobs held per queue (MONITOR)."""
        return {queue: n for queue, n in self._held_jobs.items() if n}
