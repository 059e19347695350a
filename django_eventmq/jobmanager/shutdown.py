"""Graceful stop: hand back or finish the jobs held, then say goodbye.

A mixin of :class:`.manager.JobManager` (the state it uses belongs to the job
manager).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from django_eventmq.jobmanager.lifecycle import Lifecycle, ManagedJob
from django_eventmq.jobmanager.link import RouterLink
from django_eventmq.runtime.settings import Settings

if TYPE_CHECKING:
    from django_eventmq.jobmanager.manager import _Held

logger = logging.getLogger("django_eventmq.jobmanager")


class Shutdown:
    """The drain on SIGTERM (mixed into the job manager)."""

    settings: Settings
    lifecycle: Lifecycle
    jobs: dict[int, ManagedJob]
    links: list[RouterLink[_Held]]

    if TYPE_CHECKING:

        @property
        def link(self) -> RouterLink[_Held]: ...

        def loop_once(self, timeout_ms: int | None = None, now: float | None = None) -> None: ...

        def _wait_ms(self, timeout_ms: int) -> int: ...

        def _send_records(self, now: float, *, force: bool = False) -> None: ...

    def _drain(self, timeout_ms: int) -> None:
        """Hand back or finish jobs within the grace period, then say goodbye."""
        grace = self.settings.shutdown_grace
        self.loop_once(0)  # take in REQUESTs already delivered: the router counts them as ours
        links = self.links
        if len(links) == 1:
            if self.link.session.extended:
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
            self.loop_once(self._wait_ms(timeout_ms))
        if self.jobs:
            logger.warning(
                "jobmanager stopping: grace period over, terminating jobs msgid=%s",
                ",".join(job.msgid for job in self.jobs.values()),
            )
        self._send_records(time.monotonic(), force=True)
        for link in self.links:
            link.goodbye()  # "jobmanager stopped" is run_service's line, after close()
