"""django-eventmq: background jobs for Django over ZeroMQ (eMQP/1.0).

The public names are loaded on first use, so importing the sans-IO protocol
(``django_eventmq.protocol``) loads neither pyzmq nor Django, and nothing in
this package imports Django unless the Django app is installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from django_eventmq.client.handles import JobHandle, ResultNotReady
    from django_eventmq.client.jobs import Job, job
    from django_eventmq.errors import (
        BrokerUnavailable,
        EventMQError,
        JobError,
        JobExpired,
        JobNotSent,
        JobNotUnique,
        JobRejected,
        ResultTimeout,
        Retry,
        SerializationError,
        SoftTimeLimitExceeded,
        WorkflowCancelled,
    )
    from django_eventmq.jobmanager.progress import progress
    from django_eventmq.pubsub.api import publish, subscriber
    from django_eventmq.runtime.job_context import JobContext, current_job
    from django_eventmq.scheduling.api import schedule, unschedule
    from django_eventmq.scheduling.timing import crontab, every
    from django_eventmq.workflows import WorkflowHandle, chain, chord, group

_LAZY = {
    "Job": ("django_eventmq.client.jobs", "Job"),
    "job": ("django_eventmq.client.jobs", "job"),
    "JobHandle": ("django_eventmq.client.handles", "JobHandle"),
    "ResultNotReady": ("django_eventmq.client.handles", "ResultNotReady"),
    # What .delay(), .wait() and friends raise (errors.py loads neither zmq nor Django).
    "EventMQError": ("django_eventmq.errors", "EventMQError"),
    "BrokerUnavailable": ("django_eventmq.errors", "BrokerUnavailable"),
    "JobError": ("django_eventmq.errors", "JobError"),
    "JobExpired": ("django_eventmq.errors", "JobExpired"),
    "JobNotSent": ("django_eventmq.errors", "JobNotSent"),
    "JobNotUnique": ("django_eventmq.errors", "JobNotUnique"),
    "JobRejected": ("django_eventmq.errors", "JobRejected"),
    "ResultTimeout": ("django_eventmq.errors", "ResultTimeout"),
    "Retry": ("django_eventmq.errors", "Retry"),
    "SerializationError": ("django_eventmq.errors", "SerializationError"),
    "SoftTimeLimitExceeded": ("django_eventmq.errors", "SoftTimeLimitExceeded"),
    "schedule": ("django_eventmq.scheduling.api", "schedule"),
    "unschedule": ("django_eventmq.scheduling.api", "unschedule"),
    "every": ("django_eventmq.scheduling.timing", "every"),
    "crontab": ("django_eventmq.scheduling.timing", "crontab"),
    "publish": ("django_eventmq.pubsub.api", "publish"),
    "subscriber": ("django_eventmq.pubsub.api", "subscriber"),
    "progress": ("django_eventmq.jobmanager.progress", "progress"),
    # The running job's own context (loads neither zmq nor Django).
    "current_job": ("django_eventmq.runtime.job_context", "current_job"),
    "JobContext": ("django_eventmq.runtime.job_context", "JobContext"),
    # Workflows keep their state in the database: Django's app must be set up.
    "chain": ("django_eventmq.workflows", "chain"),
    "group": ("django_eventmq.workflows", "group"),
    "chord": ("django_eventmq.workflows", "chord"),
    "WorkflowHandle": ("django_eventmq.workflows", "WorkflowHandle"),
    "WorkflowCancelled": ("django_eventmq.errors", "WorkflowCancelled"),
}

__all__ = [
    "BrokerUnavailable",
    "EventMQError",
    "Job",
    "JobContext",
    "JobError",
    "JobExpired",
    "JobHandle",
    "JobNotSent",
    "JobNotUnique",
    "JobRejected",
    "ResultNotReady",
    "ResultTimeout",
    "Retry",
    "SerializationError",
    "SoftTimeLimitExceeded",
    "WorkflowCancelled",
    "WorkflowHandle",
    "__version__",
    "chain",
    "chord",
    "crontab",
    "current_job",
    "every",
    "group",
    "job",
    "progress",
    "publish",
    "schedule",
    "subscriber",
    "unschedule",
]


def __getattr__(name: str) -> Any:
    try:
        module_name, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'django_eventmq' has no attribute {name!r}") from None
    import importlib

    value = getattr(importlib.import_module(module_name), attr)
    globals()[name] = value
    return value
