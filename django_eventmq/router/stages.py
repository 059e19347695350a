"""Named points of a job's path through the router, where a feature plugs in.

The book calls the hooks plugged into a point as a job passes it; it names no
feature. A feature is an object with methods named for the points it uses
(``on_accepted``, ``on_finished``, ...), plugged once with :meth:`Stages.plug`.
Each point is a tuple of bound methods, built when a feature is plugged (at
start-up), so a point with nothing plugged costs one empty loop per job, and
a hook that acts only for jobs with some header checks one field first.

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
- ``lost(job, why, reporter) -> bool``: a job handed out was lost (``why``:
  its worker died or went silent, its lease ran out; ``reporter``: the job
  manager that saw its worker die, if one did). A hook that takes the job
  returns True and the rest are not called; else it waits again.
- ``retry_asked(job, payload) -> bool``: a job manager's DONE ``retry``
  (``payload``: the DONE's). A hook that takes the job (it will run again)
  returns True; else the job failed.
- ``cancel_reported(job, payload) -> bool``: a job manager's DONE
  ``cancelled``. A hook that takes the job (it finished it) returns True;
  else it is finished as cancelled.
- ``settling()``: a pop from a wait queue took jobs aside instead of handing
  them out (:attr:`.waiting.Waiting.aside` is not empty: expired, parked by a
  rate limit); each feature settles those it took. Called only then: the book
  checks that one list after taking jobs from wait queues.

Plugged today: :mod:`.unique` (unique keys: taken when accepted, freed when
finished or set aside), :mod:`.expiry` (``settling``: jobs a pop found
expired are finished; ``cancel_reported``: a job held past its expiry, not
started), :mod:`.rate_limits` (``settling``: jobs a pop parked wait as
delayed), :mod:`.poisoned` (``lost``: a job that died ``poison_after`` times
is set aside) and :mod:`.retries` (``retry_asked``: retried until its
``retry-count``).

Not points: the checks made once per new job as it is accepted (an
``expires`` time already passed, a ``rate-limit`` header: a hook there would
cost every job a call), and the rate limits' wake-up
(:meth:`.Book.promote_due`). Tracing is not a stage either: it turns on and
off while the router runs (``runtime.tracing.ON``), so a plugged hook would
cost a call per job while it is off, where its direct ``if tracing.ON``
check costs less.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django_eventmq.protocol.headers import Headers
from django_eventmq.router.waiting import RoutedJob

#: The points, in the order a job may pass them.
POINTS = (
    "accepted",
    "handed_out",
    "finished",
    "set_aside",
    "retrying",
    "settling",
    "lost",
    "retry_asked",
    "cancel_reported",
)

Hook = Callable[[RoutedJob], None]
AcceptedHook = Callable[[RoutedJob, Headers, float], None]
HandedOutHook = Callable[[RoutedJob, bytes], None]
SettlingHook = Callable[[], None]
#: True: the hook took the job (the rest are not called).
LostHook = Callable[[RoutedJob, str, "bytes | None"], bool]
#: ``(job, payload)``: True if the hook took the job.
ReportHook = Callable[[RoutedJob, str], bool]


class Stages:
    """The hooks plugged into each point (see the module doc)."""

    __slots__ = POINTS

    def __init__(self) -> None:
        self.accepted: tuple[AcceptedHook, ...] = ()
        self.handed_out: tuple[HandedOutHook, ...] = ()
        self.finished: tuple[Hook, ...] = ()
        self.set_aside: tuple[Hook, ...] = ()
        self.retrying: tuple[Hook, ...] = ()
        self.settling: tuple[SettlingHook, ...] = ()
        self.lost: tuple[LostHook, ...] = ()
        self.retry_asked: tuple[ReportHook, ...] = ()
        self.cancel_reported: tuple[ReportHook, ...] = ()

    def plug(self, feature: Any) -> None:
        """Add ``feature``'s ``on_<point>`` methods to their points (at start-up:
        a part that kept a point's tuple keeps the one it read)."""
        for point in POINTS:
            hook = getattr(feature, f"on_{point}", None)
            if hook is not None:
                setattr(self, point, (*getattr(self, point), hook))
