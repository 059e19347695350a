"""What the worker processes run now, told to each router that speaks RUNNING.

``emq_status --jobs`` and the admin dashboard list the jobs a router handed
out; only the job manager knows which of them a worker process runs (and its
pid) and which wait here (prefetched). It tells its router the whole set
(:class:`..protocol.extensions.Running`) from its supervision pass, never
per job: when the set changed, at most every :data:`EVERY` seconds, and again
every :data:`REFRESH` seconds while jobs run (a router that restarted, or a
new link, learns it then). A reference router is told nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django_eventmq.jobmanager.child_handles import Child
from django_eventmq.jobmanager.managed_job import ManagedJob

#: Shortest time between two RUNNING to one router (seconds).
EVERY = 0.5
#: While jobs run, a RUNNING at least this often even with no change (seconds).
REFRESH = 5.0


class RunningReport:
    """The last RUNNING sent on each link, and when."""

    def __init__(self) -> None:
        self._sent: dict[int, frozenset[tuple[str, int]]] = {}
        self._at: dict[int, float] = {}

    def turn(
        self,
        now: float,
        children: Iterable[Child],
        jobs: Mapping[int, ManagedJob],
        links: Sequence[Any],
    ) -> None:
        """Send RUNNING on each link whose set changed (or is due a refresh).

        ``now`` is the monotonic clock the jobs' ``began`` times are on."""
        per_link: dict[int, dict[str, tuple[int, float]]] = {}
        for child in children:
            # The job it runs, and the async jobs running beside it.
            for seq in dict.fromkeys((child.head, *child.tasks)):
                job = None if seq is None else jobs.get(seq)
                if job is None or not job.began:
                    continue  # idle, or its job not seen starting yet
                since = max(0.0, now - job.began)
                per_link.setdefault(job.link, {})[job.msgid] = (child.pid, since)
        for index, link in enumerate(links):
            running = per_link.get(index, {})
            shape = frozenset((msgid, pid) for msgid, (pid, _) in running.items())
            since = now - self._at.get(index, -math.inf)
            changed = shape != self._sent.get(index, frozenset())
            if not ((changed and since >= EVERY) or (running and since >= REFRESH)):
                continue
            message = link.session.running(running)
            if message is None:
                continue  # a router that does not speak it (or not connected yet)
            link.send(message)
            self._sent[index] = shape
            self._at[index] = now
