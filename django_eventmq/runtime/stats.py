"""Counters a router or a job manager keeps about the jobs it sees, for metrics and status.

Plain integers bumped where things happen (one ``Counter`` increment per
event: no lock, no prometheus-client on the hot path), read when someone
asks: the router adds :meth:`Stats.as_dict` to its admin STATUS answer, a job
manager's metrics endpoint reads it from the scraping thread. Both endpoints
turn the same dict into the same metric families (:mod:`.metrics`).
Never imports Django.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from typing import Any

from django_eventmq.protocol.status import FAILED_OUTCOMES

#: Upper bounds (seconds) of the job duration histogram's buckets, from quick
#: jobs to the five-minute kind; one more bucket (+Inf) takes the rest.
DURATION_BUCKETS: tuple[float, ...] = (
    *(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5),
    *(1, 2.5, 5, 10, 30, 60, 300),
)


class Stats:
    """Jobs received, dispatched, finished (by status), failed, retried, timed; peers lost.

    ``finished`` is ``{queue: {status: n}}``; ``durations`` is
    ``{queue: [n per bucket..., n above the last bound, sum of seconds]}``.
    """

    __slots__ = (
        "dispatched",
        "durations",
        "failed",
        "finished",
        "heartbeats_missed",
        "received",
        "retried",
    )

    def __init__(self) -> None:
        self.received: Counter[str] = Counter()
        self.dispatched: Counter[str] = Counter()
        self.finished: dict[str, Counter[str]] = {}
        self.failed: Counter[str] = Counter()
        self.retried: Counter[str] = Counter()
        #: Peers given up on because they stayed silent past the heartbeat timeout.
        self.heartbeats_missed = 0
        self.durations: dict[str, list[float]] = {}

    def finish(self, queue: str, status: str, seconds: float | None = None) -> None:
        """A job is over with ``status`` (a ``protocol.status.JobStatus``): counted, as
        a failure if it is one, and timed."""
        by_status = self.finished.get(queue)
        if by_status is None:
            by_status = self.finished[queue] = Counter()
        by_status[status] += 1
        if status in FAILED_OUTCOMES:  # emq_jobs_failed_total
            self.failed[queue] += 1
        if seconds is not None:
            self.observe(queue, seconds)

    def observe(self, queue: str, seconds: float) -> None:
        """Add one run time to ``queue``'s histogram."""
        row = self.durations.get(queue)
        if row is None:
            row = self.durations[queue] = [0.0] * (len(DURATION_BUCKETS) + 2)
        seconds = max(0.0, seconds)
        # bisect_left: a value equal to a bound belongs to that bound's bucket (le).
        row[bisect_left(DURATION_BUCKETS, seconds)] += 1
        row[-1] += seconds

    def as_dict(self) -> dict[str, Any]:
        """The counters as JSON data (the router's STATUS extras use these keys).

        Safe from another thread than the one counting: each mapping is copied
        in one C-level step before it is walked.
        """
        return {
            "received_messages_by_queue": dict(self.received),
            "dispatched_messages_by_queue": dict(self.dispatched),
            "finished_messages_by_queue": {q: dict(c) for q, c in list(self.finished.items())},
            "failed_messages_by_queue": dict(self.failed),
            "retried_messages_by_queue": dict(self.retried),
            "heartbeats_missed": self.heartbeats_missed,
            "duration_buckets": list(DURATION_BUCKETS),
            "duration_seconds_by_queue": {
                q: {"counts": [int(n) for n in row[:-1]], "sum": row[-1]}
                for q, row in list(self.durations.items())
            },
        }
