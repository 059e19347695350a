"""Retry policy, the job manager's side: whether a failed job runs again, where and when.

:func:`decide` is the job manager's one decision on a failed attempt (the
job's ``retry-count``, the advice of its policy the child sent with the
failure, ``runtime/retry_policy.py``): given up, retried by the router it
came from (our router, DONE ``retry``), or retried here after a back-off (a
reference router, which cannot). :class:`RetryDecision` makes it at the
``failing`` point of every job (a stage, :mod:`.stages`); :class:`LocalRetries`
holds the jobs retried here until their back-off is over. A job a dead worker was running
is the router's to hand out again; it decides that itself.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

from django_eventmq.jobmanager.managed_job import ManagedJob
from django_eventmq.jobmanager.stages import Stage
from django_eventmq.runtime import retry_policy
from django_eventmq.runtime.settings import Settings


@dataclass(frozen=True, slots=True)
class Retry:
    """A failed attempt to run again."""

    #: The router the job came from retries it (DONE ``retry``); else it runs here.
    by_router: bool
    #: Seconds before the next attempt. For the router: only a delay of the job's
    #: own (its policy, or ``raise Retry``); None lets the router's back-off apply.
    delay: float | None


def decide(
    job: ManagedJob,
    payload: str,
    settings: Settings,
    rand: Callable[[], float],
    router_retries: Callable[[ManagedJob], bool],
) -> Retry | None:
    """Retry ``job``, whose attempt failed with ``payload`` (the child's failure)?
    None: it failed for good (no retries left, or its policy says no)."""
    decision = retry_policy.decide(
        job.attempt,
        job.retry_count,
        retry_policy.advice_of(payload),
        base=settings.retry_backoff_base,
        cap=settings.retry_backoff_cap,
        rand=rand,
    )
    if not decision.retry:
        return None
    if router_retries(job):
        return Retry(True, decision.delay if decision.custom else None)
    return Retry(False, decision.delay)


class RetryDecision(Stage):
    """The retry decision, at the ``failing`` point of every job."""

    def __init__(
        self,
        settings: Settings,
        router_retries: Callable[[ManagedJob], bool],
        rand: Callable[[], float],
    ) -> None:
        self.settings = settings
        #: Whether the router ``job`` came from retries it (DONE mode).
        self.router_retries = router_retries
        #: Draws in [0, 1) for retry jitter (runtime/retry_policy.py).
        self.random = rand

    def failing(self, job: ManagedJob, payload: str) -> Retry | None:
        return decide(job, payload, self.settings, self.random, self.router_retries)


class LocalRetries:
    """Jobs retried here, held until their back-off is over (by their seq)."""

    def __init__(self) -> None:
        self._due: list[tuple[float, int]] = []  # a heap of (due, seq)

    def hold(self, seq: int, due: float) -> None:
        heapq.heappush(self._due, (due, seq))

    def take_due(self, now: float) -> list[int]:
        """The seqs whose back-off is over, in order; they are no longer held."""
        due = self._due
        ready: list[int] = []
        while due and due[0][0] <= now:
            ready.append(heapq.heappop(due)[1])
        return ready

    def next_due(self) -> float | None:
        return self._due[0][0] if self._due else None

    def keep(self, jobs: dict[int, ManagedJob]) -> None:
        """Hold only the jobs still in ``jobs``."""
        self._due = [(due, seq) for due, seq in self._due if seq in jobs]
        heapq.heapify(self._due)

    def clear(self) -> None:
        self._due.clear()
