"""Named points of a job's path through the router, where a feature plugs in.

The book calls the hooks plugged into a point as a job passes it; it names no
feature. A feature is an object with methods named for the points it uses
(``on_accepted``, ``on_finished``, ...), plugged once with :meth:`Stages.plug`.
A point with nothing plugged costs one empty loop per job.

The points:

- ``accepted(job, headers, wall)``: a new job is stored (``headers``: its
  parsed headers, ``wall``: unix time of acceptance).
- ``handed_out(job, jobmanager)``: a job was sent to the job manager
  ``jobmanager`` (its identity).
- ``finished(job)``: a job left the router for good: done, refused, expired,
  cancelled.
- ``set_aside(job)``: a job was poisoned (its worker died too often); it stays
  in the journal for the admin.
- ``retrying(job)``: a job waits (delayed) for its next attempt.

Plugged today: :mod:`.unique` (unique keys: taken when accepted, freed when
finished or set aside). Tracing is not a stage: it turns on and off while the
router runs (``runtime.tracing.ON``), so a plugged hook would cost a call per
job while it is off, where its check costs less.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django_eventmq.protocol.headers import Headers
from django_eventmq.router.waiting import RoutedJob

#: The points, in the order a job may pass them.
POINTS = ("accepted", "handed_out", "finished", "set_aside", "retrying")

Hook = Callable[[RoutedJob], None]
AcceptedHook = Callable[[RoutedJob, Headers, float], None]
HandedOutHook = Callable[[RoutedJob, bytes], None]


class Stages:
    """The hooks plugged into each point (see the module doc)."""

    __slots__ = POINTS

    def __init__(self) -> None:
        self.accepted: list[AcceptedHook] = []
        self.handed_out: list[HandedOutHook] = []
        self.finished: list[Hook] = []
        self.set_aside: list[Hook] = []
        self.retrying: list[Hook] = []

    def plug(self, feature: Any) -> None:
        """Add ``feature``'s ``on_<point>`` methods to their points."""
        for point in POINTS:
            hook = getattr(feature, f"on_{point}", None)
            if hook is not None:
                getattr(self, point).append(hook)
