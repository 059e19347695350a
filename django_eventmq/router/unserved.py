"""Jobs waiting on a queue that no connected job manager serves: said once per queue.

Such jobs wait until a job manager that names the queue connects (a REQUEST
never runs on another queue), which usually means a typo in a queue name or
a job manager started with the wrong ``--queues``. The router says so once
per queue, after a grace period (job managers reconnecting after a router
restart are not a problem), and again only once the queue was served and is
unserved again. Bookkeeping only: time is passed in.
"""

from __future__ import annotations

from django_eventmq.router.routing import Routing

__all__ = ["UnservedQueues"]


class UnservedQueues:
    """Which unserved queues to warn about, and when."""

    def __init__(self, grace: float) -> None:
        self.grace = grace
        #: Queues warned about, until a job manager serves them.
        self.warned: set[str] = set()
        #: Unserved queue with jobs -> since when (not warned yet).
        self._since: dict[str, float] = {}

    def check(self, routing: Routing, now: float) -> list[tuple[str, int]]:
        """``(queue, jobs waiting)`` of the queues to warn about now."""
        served = routing.served_queues()
        self.warned -= served
        unserved = routing.unserved(served)
        for queue in list(self._since):
            if queue not in unserved:
                del self._since[queue]
        due = []
        for queue, count in unserved.items():
            if queue in self.warned:
                continue
            if now - self._since.setdefault(queue, now) >= self.grace:
                del self._since[queue]
                self.warned.add(queue)
                due.append((queue, count))
        return due
