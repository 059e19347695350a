"""Results that expire by themselves (``RESULT_EXPIRES``), swept by the scheduler.

The scheduler already runs once per site and already talks to the database,
so it removes finished job results (and finished workflows) last written
more than ``RESULT_EXPIRES`` seconds ago: no cron job. It sweeps every
:func:`sweep_every` seconds, :data:`BATCH` rows per statement: after a full
batch the next one follows on the next turn of the scheduler's loop (due
schedules fire in between), so a big backlog never holds a lock for long
nor keeps a schedule waiting. Several schedulers sweep the same rows
harmlessly (a row deleted twice is deleted once).

Never imports Django: the store does the deleting
(:meth:`.scheduler.ScheduleDatabase.expire_results`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

logger = logging.getLogger("django_eventmq.scheduler")

#: Rows deleted per statement (per table), so no DELETE holds locks for long.
BATCH = 1000
#: Longest time between two sweeps, in seconds.
LONGEST_SWEEP_INTERVAL = 300.0
#: Shortest time between two sweeps, in seconds.
SHORTEST_SWEEP_INTERVAL = 1.0


def sweep_every(expires: float) -> float:
    """Seconds between sweeps: a tenth of ``expires``, between 1 s and 5 min (so a
    result outlives its ``RESULT_EXPIRES`` by at most a tenth, or five minutes)."""
    return min(LONGEST_SWEEP_INTERVAL, max(SHORTEST_SWEEP_INTERVAL, expires / 10))


class ResultExpiry:
    """When the next batch of expired results is due, and what the sweep removed so far."""

    def __init__(self, expires: float, batch: int = BATCH) -> None:
        #: Seconds a finished result is kept (0: results never expire).
        self.expires = expires
        self.batch = batch
        self.every = sweep_every(expires) if expires else 0.0
        #: Monotonic time of the next batch (the first at the first turn).
        self.next_at = 0.0
        self._removed = 0

    @property
    def enabled(self) -> bool:
        return self.expires > 0

    def wait(self, mono: float) -> float:
        """Seconds until the next batch is due (how long the loop may block)."""
        return max(0.0, self.next_at - mono) if self.enabled else float("inf")

    def turn(self, mono: float, now: datetime, expire: Callable[[datetime, int], int]) -> None:
        """Delete one batch if one is due; ``expire(before, batch)`` is the store's.

        A store that fails raises (the scheduler logs it once); the sweep is
        tried again after the interval.
        """
        if not self.enabled or mono < self.next_at:
            return
        self.next_at = mono + self.every
        deleted = expire(now - timedelta(seconds=self.expires), self.batch)
        self._removed += deleted
        if deleted >= self.batch:  # more are waiting: the next batch at the next turn
            self.next_at = mono
            return
        if self._removed:
            logger.info(
                "scheduler: removed %d finished results and workflows older than "
                "RESULT_EXPIRES=%gs",
                self._removed,
                self.expires,
            )
        self._removed = 0


__all__ = ["BATCH", "ResultExpiry", "sweep_every"]
