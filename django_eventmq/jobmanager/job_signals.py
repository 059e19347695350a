"""The job events (the Django signals), in the worker child: started, succeeded, failed, retrying.

A run stage (:mod:`.run_stages`) that acts only while a listener is
installed (runtime/job_events.py: the Django app's ``signals`` module,
imported by whoever connects a receiver); the runner's plans are made again
when one is, so a child where nobody listens never calls it.
"""

from __future__ import annotations

from typing import Any

from django_eventmq.jobmanager.run_stages import RunStage
from django_eventmq.runtime import job_events, retry_policy
from django_eventmq.runtime.job_context import Running


class JobSignals(RunStage):
    """Tells the installed listener what happens to each job."""

    def wants(self, traced: bool) -> bool:
        return job_events.listener is not None

    def before(self, running: Running) -> None:
        listener = job_events.listener
        if listener is not None:
            listener.started(running)

    def succeeded(self, running: Running, value: Any) -> None:
        listener = job_events.listener
        if listener is not None:
            listener.succeeded(running, value)

    def failed(self, running: Running, exc: BaseException, advice: dict[str, Any]) -> None:
        """Failed for good, or to be retried (the job manager decides the same way,
        from the same advice: retry_policy.given_up)."""
        listener = job_events.listener
        if listener is None:
            return
        context = running.context()
        if retry_policy.given_up(context.attempt, context.headers.retry_count, advice):
            listener.failed(running, exc)
        else:
            listener.retrying(running, exc)
