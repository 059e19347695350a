"""django-eventmq: background jobs for Django over ZeroMQ (eMQP/1.0).

Importing this package does not import Django, so Spark executors and the
bare router can use it.
"""

from __future__ import annotations

from .core.jobs import Job, job
from .errors import EventMQError

__version__ = "0.1.0"

__all__ = ["EventMQError", "Job", "__version__", "job"]
