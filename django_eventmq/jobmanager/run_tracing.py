"""Tracing, the job manager's side: the trace context a traced job's child run span needs.

A stage (:mod:`.stages`) for the jobs whose headers carry more than the
known fields (a ``traceparent`` among them, runtime/tracing.py): it makes
the carrier the child opens the job's ``run`` span with, passed in the
pipe's J frame (b"": untraced, the child opens none).
"""

from __future__ import annotations

from django_eventmq.jobmanager.managed_job import ManagedJob
from django_eventmq.jobmanager.stages import Stage
from django_eventmq.protocol.headers import Headers
from django_eventmq.runtime import tracing


class RunTracing(Stage):
    """Gives a traced job the carrier of its run span."""

    def wants(self, headers: Headers, record: bool) -> bool:
        return bool(headers.extra)

    def accepted(self, job: ManagedJob, headers: Headers) -> None:
        job.trace = tracing.run_carrier(job.msgid, job.queue, headers.extra)
