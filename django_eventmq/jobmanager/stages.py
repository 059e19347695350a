"""The named points of a job's path in the job manager, and the features plugged into them.

A feature that acts on jobs as they go (results recording, partials,
tracing, soft limits, expiry...) is one :class:`Stage`, in a module of its
own, registered with one line in :class:`.lifecycle.Lifecycle` (its tuple
of stages). It overrides the points it acts at; the lifecycle and the
endings call whatever is registered there and name no feature:

==============  ============================================  ===================
point           when                                          called with
==============  ============================================  ===================
``accepted``    the job manager took the job in (the          ``(job, headers)``
                lifecycle's ``accept``, or its ``refuse``)
``handing_out`` just before a child gets it; a stage may      ``(job, now)``
                return an ending to settle it with instead
``started``     it runs in a child (first seen running)       ``(job, child)``
``progress``    a partial of it was let through               ``(job, payload)``
``failing``     its attempt failed: the first stage that      ``(job, payload)``
                returns a retry has it run again
``ended``       its run is over: succeeded, retrying,         ``(job, status, now,
                failed, cancelled, expired, timed out, lost    value, error)``
``set_aside``   the router poisoned it after its worker died  ``(job, error, now)``
``reporting``   its outcome goes to the router next           ``(job,)``
==============  ============================================  ===================

Cost: which stages act on a job is decided once per distinct parsed
:class:`.Headers` (they are cached, so most jobs share one) and whether it
is recorded: that :class:`Plan` holds, per point, the tuple of bound methods
to call. A job no feature acts on gets a plan of empty tuples: each point
costs it a test of an empty tuple. A feature may also join a job's plan on
its way (:meth:`Plan.joined`: partials, when the job reports its first).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from django_eventmq.jobmanager.child_handles import Child
from django_eventmq.protocol.headers import EMPTY_HEADERS, Headers
from django_eventmq.protocol.status import JobStatus

if TYPE_CHECKING:  # both import this module: managed_job.py for NO_STAGES
    from django_eventmq.jobmanager.managed_job import ManagedJob
    from django_eventmq.jobmanager.retries import Retry

#: How a job is settled when a ``handing_out`` stage stops it: ``(job, now)``.
Ending = Callable[["ManagedJob", float], None]

#: The points, in the order a job passes them (the names of :class:`Stage`'s methods).
POINTS = (
    "accepted",
    "handing_out",
    "started",
    "progress",
    "failing",
    "ended",
    "set_aside",
    "reporting",
)


class Stage:
    """A feature on the job's path: override :meth:`wants` and the points it acts at
    (a point not overridden is not called)."""

    def wants(self, headers: Headers, record: bool) -> bool:
        """Whether it acts on jobs sent with ``headers`` (``record``: their outcome
        records are kept). Asked once per distinct headers, not per job."""
        return True

    def accepted(self, job: ManagedJob, headers: Headers) -> None:
        """The job manager took ``job`` in."""

    def handing_out(self, job: ManagedJob, now: float) -> Ending | None:
        """``job`` goes to a child next; an ending settles it instead (not run)."""
        return None

    def started(self, job: ManagedJob, child: Child) -> None:
        """``job`` runs in ``child``."""

    def progress(self, job: ManagedJob, payload: str) -> None:
        """A partial of ``job`` (``{"value": ...}`` JSON) was let through."""

    def failing(self, job: ManagedJob, payload: str) -> Retry | None:
        """The attempt of ``job`` failed (``payload``: the child's failure): a retry
        has it run again (None: not this stage's to retry)."""
        return None

    def ended(
        self,
        job: ManagedJob,
        status: JobStatus,
        now: float,
        value: object,
        error: dict[str, str] | None,
    ) -> None:
        """The run of ``job`` is over with ``status`` (``value``: what it returned;
        ``error``: why it failed)."""

    def set_aside(self, job: ManagedJob, error: dict[str, str], now: float) -> None:
        """The router set aside ``job``, whose worker died under it (it runs no more)."""

    def reporting(self, job: ManagedJob, /) -> None:
        """The outcome of ``job`` goes to the router next."""


class Plan:
    """The stages that act on a job, per point: tuples of bound methods."""

    __slots__ = POINTS

    accepted: tuple[Callable[[ManagedJob, Headers], None], ...]
    handing_out: tuple[Callable[[ManagedJob, float], Ending | None], ...]
    started: tuple[Callable[[ManagedJob, Child], None], ...]
    progress: tuple[Callable[[ManagedJob, str], None], ...]
    failing: tuple[Callable[[ManagedJob, str], Retry | None], ...]
    ended: tuple[Callable[[ManagedJob, JobStatus, float, object, dict[str, str] | None], None], ...]
    set_aside: tuple[Callable[[ManagedJob, dict[str, str], float], None], ...]
    reporting: tuple[Callable[[ManagedJob], None], ...]

    def __init__(self, stages: Sequence[Stage] = ()) -> None:
        for point in POINTS:
            setattr(self, point, tuple(_acts_at(stages, point)))

    def joined(self, stage: Stage) -> Plan:
        """This plan with ``stage`` acting last at its points: a feature that joins a
        job on its way (partials, at a job's first)."""
        plan = Plan()
        for point in POINTS:
            setattr(plan, point, (*getattr(self, point), *_acts_at([stage], point)))
        return plan


def _acts_at(stages: Sequence[Stage], point: str) -> list[Callable[..., object]]:
    """The callables of ``stages`` at ``point``, in order: those overridden (a method
    of the stage's class, or a callable it set on itself, such as a part's own method)."""
    base = getattr(Stage, point)
    acting = []
    for stage in stages:
        method = getattr(stage, point)
        if getattr(method, "__func__", method) is not base:
            acting.append(method)
    return acting


#: The plan of a job no stage acts on (and of a ``ManagedJob`` made outside the job
#: manager's intake, such as in tests).
NO_STAGES = Plan()


class Stages:
    """The stages of one job manager, and the plan of each kind of job."""

    def __init__(self, stages: Sequence[Stage] = ()) -> None:
        self.stages = tuple(stages)
        # Parsed headers are cached (one object per distinct header frame): their
        # plans are found by the object's id; the entry holds the object, so its
        # id is not reused while it is there.
        self._plans: dict[int, tuple[Headers, Plan, Plan]] = {}
        #: The last headers' plans: jobs come in runs sent with the same headers (or
        #: none), and an identity check costs less than a look-up (and a call: the
        #: lifecycle looks here first).
        self.last: tuple[Headers, Plan, Plan] = self._plan_for(EMPTY_HEADERS)

    def fit(self, job: ManagedJob) -> None:
        """Give ``job`` (just accepted) its plan, and call the ``accepted`` stages."""
        headers = job.headers or EMPTY_HEADERS
        found = self.last
        if found[0] is not headers:
            found = self.last = self._plans_of(headers)
        plan = job.plan = found[2] if job.record else found[1]
        if plan.accepted:  # a test costs less than a loop over nothing
            for hook in plan.accepted:
                hook(job, headers)

    def plan(self, headers: Headers, record: bool) -> Plan:
        """The plan of a job sent with ``headers``, recorded or not."""
        found = self._plans_of(headers)
        return found[2] if record else found[1]

    def _plans_of(self, headers: Headers) -> tuple[Headers, Plan, Plan]:
        found = self._plans.get(id(headers))
        if found is None or found[0] is not headers:
            found = self._plan_for(headers)
        return found

    def _plan_for(self, headers: Headers) -> tuple[Headers, Plan, Plan]:
        plans = self._plans
        if len(plans) >= 256:
            plans.clear()
        found = plans[id(headers)] = (
            headers,
            self._made(headers, False),
            self._made(headers, True),
        )
        return found

    def _made(self, headers: Headers, record: bool) -> Plan:
        acting = [stage for stage in self.stages if stage.wants(headers, record)]
        return Plan(acting) if acting else NO_STAGES
