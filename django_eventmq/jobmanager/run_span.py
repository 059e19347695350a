"""Tracing, in the worker child: a traced job's ``run`` span (runtime/tracing.py).

A run stage (:mod:`.run_stages`) for the jobs that came with a trace carrier
(:mod:`.run_tracing` made it in the job manager): the run happens in the
span, which is named for the job once its body is read and marked failed
with any error the run reports. An untraced job never calls it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from django_eventmq.jobmanager.run_stages import RunStage
from django_eventmq.runtime import tracing


class RunSpan(RunStage):
    """The ``run`` span of a traced job."""

    def wants(self, traced: bool) -> bool:
        return traced

    def around(self, carrier: bytes) -> AbstractContextManager[object]:
        return tracing.running(carrier)

    def named(self, name: str) -> None:
        tracing.job_named(name)

    def error(self, exc: BaseException) -> None:
        tracing.job_failed(exc)
