"""Worker children that fail to start: back off, and say why no job can run.

The pool holds one :class:`StartFailures`. A child that exits before it was
ever up (a broken hooks module, a job module that does not import) delays
the next start, doubling up to :data:`MAX_START_DELAY`; while none comes up,
:attr:`StartFailures.trouble` says why, and the job manager takes no jobs.
"""

from __future__ import annotations

import logging

from django_eventmq.jobmanager.child_handles import Child

logger = logging.getLogger("django_eventmq.pool")

#: Longest wait before restarting children that keep failing to start.
MAX_START_DELAY = 10.0


class StartFailures:
    """Start-up failures of one pool's children, since one was last up."""

    def __init__(self) -> None:
        self.count = 0
        #: No child is started before this (monotonic).
        self.next_start = 0.0
        self._logged = False
        self._last = ""

    @property
    def trouble(self) -> str:
        """Why no child can run jobs ("" while one is up, or none failed to start yet)."""
        return self._last if self.count else ""

    def up(self) -> None:
        """A child came up: starting works."""
        self.count = 0
        self._logged = False

    def failed(self, child: Child, now: float) -> None:
        """``child`` exited before it was up: wait longer before the next start."""
        self.count += 1
        self.next_start = now + min(0.5 * 2 ** (self.count - 1), MAX_START_DELAY)
        why = child.failure or f"exit code {child.process.exitcode}"
        # One line, bounded: it goes to the routers (FEATURES, NACK reasons) and emq_status.
        self._last = f"worker processes cannot start: {' '.join(why.split())[:400]}"
        if not self._logged:
            logger.error("worker child pid=%d failed to start: %s", child.pid, why)
            self._logged = True
        else:
            logger.debug("worker child pid=%d failed to start again: %s", child.pid, why)
