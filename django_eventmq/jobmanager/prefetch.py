"""Adaptive prefetch: how many jobs a job manager takes beyond its free worker processes.

Prefetch keeps each worker process's next jobs at hand, so it never idles for
a round trip to the router. That pays while jobs are short and costs while
they are long: a prefetched job is that job manager's, so another job manager
with a free process cannot run it, and a job with a higher priority that
comes later runs after it. So the prefetch follows how long jobs run:

    prefetch = min(PREFETCH, floor(PREFETCH_BUDGET * concurrency / mean run time))

that is, about ``PREFETCH_BUDGET`` seconds of queued work per worker process
beyond the job it runs. The mean is an exponentially weighted moving average
of the run times the pool measures (:meth:`Prefetch.observe`), so a change of
workload shows within a few jobs.

* Until a job has been timed, the prefetch is 0: a job manager starting on a
  backlog of long jobs takes none it cannot run at once; the first short jobs
  raise it to the cap.
* ``PREFETCH = 0``: never any prefetch. ``PREFETCH_BUDGET = 0``: always
  ``PREFETCH`` (fixed, the behaviour before prefetch adapted).

Pure arithmetic: no clock (run times are measured by the caller), no I/O.
"""

from __future__ import annotations

import math

from django_eventmq.runtime.settings import Settings

#: Weight of the newest run time in the moving average: a job that runs 100x
#: longer than the mean moves it ~20x, so a change to long jobs shows at once,
#: while one slow job among short ones is forgotten within ~15 jobs.
ALPHA = 0.2


class Prefetch:
    """The current prefetch of one job manager, from the run times of its jobs."""

    __slots__ = ("_work", "budget", "cap", "concurrency", "depth", "mean", "value")

    def __init__(self, cap: int, budget: float, concurrency: int) -> None:
        self.cap = cap
        self.budget = budget
        self.concurrency = concurrency
        #: Moving average of run times, in seconds (None: no job timed yet).
        self.mean: float | None = None
        #: Seconds of queued work the whole pool may hold.
        self._work = budget * concurrency
        #: Jobs taken beyond the free processes now (READY slots beyond concurrency).
        self.value = 0
        #: Jobs one child may hold: the one it runs and its share of the prefetch.
        self.depth = 1
        self._set(cap if self.fixed else 0)

    @classmethod
    def from_settings(cls, settings: Settings) -> Prefetch:
        """The prefetch ``PREFETCH``, ``PREFETCH_BUDGET`` and ``CONCURRENCY`` describe."""
        return cls(settings.prefetch, settings.prefetch_budget, settings.initial_workers)

    @property
    def fixed(self) -> bool:
        """True when the prefetch does not adapt (``PREFETCH`` or ``PREFETCH_BUDGET`` is 0)."""
        return self.cap == 0 or self.budget == 0

    def observe(self, seconds: float) -> None:
        """Take one job's run time (0 for a job that ran between two looks)."""
        if self.fixed:
            return
        seconds = max(0.0, seconds)
        mean = self.mean
        mean = seconds if mean is None else mean + ALPHA * (seconds - mean)
        self.mean = mean
        value = self._for(mean)
        if value != self.value:
            self._set(value)

    def _for(self, mean: float) -> int:
        """The prefetch for a mean run time of ``mean`` seconds."""
        work = self._work
        return self.cap if mean * self.cap <= work else int(work / mean)

    def resize(self, concurrency: int) -> None:
        """Follow a pool that grew or shrank (autoscaling): the budget is per process."""
        self.concurrency = concurrency
        self._work = self.budget * concurrency
        mean = self.mean
        self._set(self.value if self.fixed or mean is None else self._for(mean))

    def _set(self, value: int) -> None:
        self.value = value
        self.depth = 1 + math.ceil(value / self.concurrency)
