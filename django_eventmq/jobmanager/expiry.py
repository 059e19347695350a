"""Expiry, the job manager's side: a job not started before its ``expires`` time never runs.

A stage (:mod:`.stages`) for the jobs sent with an ``expires`` header only:
it keeps the time when the job is accepted and, each time the job is about
to go to a child (prefetched, or back from a retry held here), settles it
``expired`` instead (:meth:`.endings.Endings.expired`) once that time passed.
"""

from __future__ import annotations

import time

from django_eventmq.jobmanager.managed_job import ManagedJob
from django_eventmq.jobmanager.stages import Ending, Stage
from django_eventmq.protocol.headers import Headers


class Expiry(Stage):
    """Jobs with an ``expires`` time are not started past it."""

    def __init__(self, expired: Ending) -> None:
        self._expired = expired

    def wants(self, headers: Headers, record: bool) -> bool:
        return headers.expires is not None

    def accepted(self, job: ManagedJob, headers: Headers) -> None:
        job.expires = headers.expires

    def handing_out(self, job: ManagedJob, now: float) -> Ending | None:
        expires = job.expires
        return self._expired if expires is not None and expires <= time.time() else None
