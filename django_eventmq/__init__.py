"""django-eventmq: background jobs for Django over ZeroMQ (eMQP/1.0).

The public names are loaded on first use, so importing the sans-IO protocol
(``django_eventmq.protocol``) loads neither pyzmq nor Django, and nothing in
this package imports Django unless the Django app is installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .core.handles import JobHandle, ResultNotReady
    from .core.jobs import Job, job
    from .core.progress import progress
    from .core.pubsub import publish, subscriber
    from .core.schedule_api import schedule, unschedule
    from .core.schedules import crontab, every
    from .errors import (
        BrokerUnavailable,
        EventMQError,
        JobError,
        JobRejected,
        ResultTimeout,
        SerializationError,
    )

_LAZY = {
    "Job": ("django_eventmq.core.jobs", "Job"),
    "job": ("django_eventmq.core.jobs", "job"),
    "JobHandle": ("django_eventmq.core.handles", "JobHandle"),
    "ResultNotReady": ("django_eventmq.core.handles", "ResultNotReady"),
    # What .delay(), .wait() and friends raise (errors.py loads neither zmq nor Django).
    "EventMQError": ("django_eventmq.errors", "EventMQError"),
    "BrokerUnavailable": ("django_eventmq.errors", "BrokerUnavailable"),
    "JobError": ("django_eventmq.errors", "JobError"),
    "JobRejected": ("django_eventmq.errors", "JobRejected"),
    "ResultTimeout": ("django_eventmq.errors", "ResultTimeout"),
    "SerializationError": ("django_eventmq.errors", "SerializationError"),
    "schedule": ("django_eventmq.core.schedule_api", "schedule"),
    "unschedule": ("django_eventmq.core.schedule_api", "unschedule"),
    "every": ("django_eventmq.core.schedules", "every"),
    "crontab": ("django_eventmq.core.schedules", "crontab"),
    "publish": ("django_eventmq.core.pubsub", "publish"),
    "subscriber": ("django_eventmq.core.pubsub", "subscriber"),
    "progress": ("django_eventmq.core.progress", "progress"),
}

__all__ = [
    "BrokerUnavailable",
    "EventMQError",
    "Job",
    "JobError",
    "JobHandle",
    "JobRejected",
    "ResultNotReady",
    "ResultTimeout",
    "SerializationError",
    "__version__",
    "crontab",
    "every",
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
