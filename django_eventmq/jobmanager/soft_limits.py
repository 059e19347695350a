"""Soft time limits, the job manager's side: the ``soft-timeout`` header, kept for the child.

A stage (:mod:`.stages`) for the jobs sent with a ``soft-timeout`` only: the
limit goes to the child with the job (the pipe's J frame), which raises
``SoftTimeLimitExceeded`` inside it (:mod:`.invoke`); the hard ``timeout``
is still the lifecycle's to enforce.
"""

from __future__ import annotations

from django_eventmq.jobmanager.managed_job import ManagedJob
from django_eventmq.jobmanager.stages import Stage
from django_eventmq.protocol.headers import Headers


class SoftLimits(Stage):
    """Keeps a job's ``soft-timeout`` for its child."""

    def wants(self, headers: Headers, record: bool) -> bool:
        return headers.soft_timeout is not None

    def accepted(self, job: ManagedJob, headers: Headers) -> None:
        job.soft_timeout = headers.soft_timeout
