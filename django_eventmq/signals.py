"""Django signals for what happens to a job (docs/signals.md).

- ``job_sent``: in the sending process, once ``.delay()`` / ``.send()`` handed
  the job to the socket (``guarantee`` jobs: once the router acknowledged it);
- ``job_started``: in the worker process, just before the job's code runs;
- ``job_succeeded``: it returned (``result``: the value, as sent back);
- ``job_failed``: it raised and will not run again (``exception``);
- ``job_retrying``: it raised and will run again (``exception``).

Each is sent with ``sender`` the :class:`~django_eventmq.Job` (what ``@job``
returned; its dotted name when the job has no ``@job`` in this process) and
``context`` its :class:`~django_eventmq.JobContext` (msgid, name, queue,
attempt, retries left, headers, args, kwargs). A receiver that raises is
logged and changes nothing: the job's outcome is its own.

The process packages never import Django: importing this module installs a
listener into their hook points (``runtime/job_events.py``), so a process
where nothing imported it pays nothing; one where receivers are connected
builds the context only for the signals that have some.
"""

from __future__ import annotations

import logging
from typing import Any

from django.dispatch import Signal

from django_eventmq.runtime import job_events, registry
from django_eventmq.runtime.job_context import Lazy, Running

logger = logging.getLogger("django_eventmq.signals")

job_sent = Signal()
job_started = Signal()
job_succeeded = Signal()
job_failed = Signal()
job_retrying = Signal()


def _sender(name: str) -> Any:
    """The ``Job`` object ``@job`` made for ``name`` in this process, else ``name``."""
    from django_eventmq.client.jobs import registered_job

    return registered_job(registry.canonical_name(name)) or name


def _send(signal: Signal, job: Running | Lazy, **extra: Any) -> None:
    if not signal.receivers:  # the common case: nobody connected to this one
        return
    try:
        context = job.context()
        answers = signal.send_robust(_sender(context.name), context=context, **extra)
    except Exception:  # the job's outcome is its own, whatever happens here
        logger.exception("a job signal could not be sent")
        return
    for receiver, answer in answers:
        if isinstance(answer, Exception):
            logger.error(
                "a receiver of a job signal raised (msgid=%s job=%s): %r: %s",
                context.msgid,
                context.name,
                receiver,
                answer,
                exc_info=answer,
            )


class _SignalListener:
    """Sends our signals from the process packages' hook points."""

    def sent(self, job: Running | Lazy) -> None:
        _send(job_sent, job)

    def started(self, job: Running | Lazy) -> None:
        _send(job_started, job)

    def succeeded(self, job: Running | Lazy, result: Any) -> None:
        _send(job_succeeded, job, result=result)

    def failed(self, job: Running | Lazy, exception: BaseException) -> None:
        _send(job_failed, job, exception=exception)

    def retrying(self, job: Running | Lazy, exception: BaseException) -> None:
        _send(job_retrying, job, exception=exception)


job_events.install(_SignalListener())
