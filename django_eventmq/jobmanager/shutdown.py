"""Graceful stop: hand back or finish the jobs held, then say goodbye.

The job manager holds one :class:`Shutdown`; it turns the job manager's
loop (``turn``) until the jobs are over or the grace period is.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from django_eventmq.jobmanager.lifecycle import Lifecycle
from django_eventmq.jobmanager.link import RouterLink
from django_eventmq.runtime.settings import Settings

logger = logging.getLogger("django_eventmq.jobmanager")


class Shutdown:
    """The drain on SIGTERM."""

    def __init__(
        self,
        settings: Settings,
        lifecycle: Lifecycle,
        links: Sequence[RouterLink[Any]],
        *,
        turn: Callable[[int], None],
        wait_ms: Callable[[int], int],
        flush_records: Callable[[float], None],
    ) -> None:
        #: Seconds the jobs held get to finish (SHUTDOWN_GRACE).
        self.grace = settings.shutdown_grace
        self.lifecycle = lifecycle
        self.jobs = lifecycle.jobs
        self.links = links
        #: One turn of the job manager's loop, waiting up to the given milliseconds.
        self._turn = turn
        #: The poll timeout of a turn (shorter when a retry or a partial is due).
        self._wait_ms = wait_ms
        #: Hands every outcome record waiting to a child, due or not.
        self._flush_records = flush_records

    def drain(self, timeout_ms: int) -> None:
        """Hand back or finish jobs within the grace period, then say goodbye."""
        grace = self.grace
        self._turn(0)  # take in REQUESTs already delivered: the router counts them as ours
        links = self.links
        if len(links) == 1:
            if links[0].session.extended:
                # Our router can give unstarted jobs to someone else right away.
                self.lifecycle.hand_back_unstarted()
        elif any(link.session.extended for link in links):
            self.lifecycle.hand_back_unstarted(lambda job: links[job.link].session.extended)
        if self.jobs:
            logger.info(
                "jobmanager stopping: waiting up to %ss for %d job(s)", grace, len(self.jobs)
            )
        deadline = time.monotonic() + grace
        while self.jobs and time.monotonic() < deadline:
            self._turn(self._wait_ms(timeout_ms))
        if self.jobs:
            logger.warning(
                "jobmanager stopping: grace period over, terminating jobs msgid=%s",
                ",".join(job.msgid for job in self.jobs.values()),
            )
        self._flush_records(time.monotonic())
        for link in self.links:
            link.goodbye()  # "jobmanager stopped" is run_service's line, after close()
