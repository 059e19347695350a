"""In a worker child: the named points of a job's run, and the features plugged into them.

The child's side of :mod:`.stages`: a feature that acts on a run (the job
signals, the hooks module's ``before_job``/``after_job``, the run span of a
traced job) is one :class:`RunStage`, in a module of its own, listed in
:func:`.job_runner.run_stages`. :class:`.job_runner.JobRunner` calls the
stages registered at each point and names no feature:

=============  ================================================  =====================
point          when                                              called with
=============  ================================================  =====================
``around``     the whole run of a traced job (a context          ``(carrier)``
               manager: entered first, left last)
``named``      its body was read                                 ``(job name)``
``before``     before the call (one raising: the job fails,      ``(running)``
               and the ``after`` stages are not called)
``after``      after the call, however it went                   ``(running)``
``succeeded``  the job returned (a JSON-serialisable value)      ``(running, value)``
``failed``     the job raised (or returned what is not JSON)     ``(running, exc,
                                                                 retry advice)``
``error``      any error the run reports, refused jobs too       ``(exc)``
=============  ================================================  =====================

Cost: the stages that act are decided when the runner is made (and again
when a job-event listener is installed): two :class:`RunPlan` s, for an
untraced and a traced job (the one field a job's frame carries for them).
A job no feature acts on loops over empty tuples.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from django_eventmq.runtime.job_context import Running

#: The run's points, in the order a run passes them (the names of RunStage's methods).
RUN_POINTS = ("around", "named", "before", "after", "succeeded", "failed", "error")


class RunStage:
    """A feature on a job's run in a worker child: override :meth:`wants` and the
    points it acts at (a point not overridden is not called)."""

    def wants(self, traced: bool) -> bool:
        """Whether it acts on a run (``traced``: the job came with a trace carrier).
        Asked when the runner's plans are made, not per job."""
        return True

    def around(self, carrier: bytes) -> AbstractContextManager[object]:
        """What the whole run of a traced job happens in."""
        raise NotImplementedError

    def named(self, name: str) -> None:
        """The job's body was read: it is ``name``."""

    def before(self, running: Running) -> None:
        """The job is about to be called."""

    def after(self, running: Running) -> None:
        """The call is over, however it went."""

    def succeeded(self, running: Running, value: Any) -> None:
        """The job returned ``value``."""

    def failed(self, running: Running, exc: BaseException, advice: dict[str, Any]) -> None:
        """The job failed with ``exc``; ``advice``: its retry policy's (runtime/retry_policy.py)."""

    def error(self, exc: BaseException) -> None:
        """The run reports ``exc`` (the job failed, or was refused or not found)."""


class RunPlan:
    """The stages that act on a run, per point: tuples of bound methods."""

    __slots__ = RUN_POINTS

    around: tuple[Callable[[bytes], AbstractContextManager[object]], ...]
    named: tuple[Callable[[str], None], ...]
    before: tuple[Callable[[Running], None], ...]
    after: tuple[Callable[[Running], None], ...]
    succeeded: tuple[Callable[[Running, Any], None], ...]
    failed: tuple[Callable[[Running, BaseException, dict[str, Any]], None], ...]
    error: tuple[Callable[[BaseException], None], ...]

    def __init__(self, stages: Sequence[RunStage] = ()) -> None:
        for point in RUN_POINTS:
            base = getattr(RunStage, point)
            setattr(
                self,
                point,
                tuple(
                    getattr(stage, point)
                    for stage in stages
                    if getattr(type(stage), point) is not base
                ),
            )


def plans(stages: Sequence[RunStage]) -> tuple[RunPlan, RunPlan]:
    """The plans of an untraced and of a traced run."""
    return (
        RunPlan([stage for stage in stages if stage.wants(False)]),
        RunPlan([stage for stage in stages if stage.wants(True)]),
    )
