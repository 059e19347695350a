"""Start django-eventmq jobs from PySpark: every row of a DataFrame becomes a job.

    from django_eventmq.contrib.spark import enqueue_dataframe

    result = enqueue_dataframe(
        digests, "app.jobs.send_digest", queue="email",
        broker="tcp://router:47291", run_id="digest-2024-05-01", key=["user_id", "day"],
    )
    print(result)   # per queue: sent, acked, rejected

The executors need pyspark, pyarrow and pyzmq; never Django. Importing this
package loads neither Spark nor Arrow: its names are loaded on first use.
See docs/spark.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django_eventmq.contrib.spark.driver import EnqueueResult, enqueue_dataframe, jobs_dataframe
    from django_eventmq.contrib.spark.encoding import JobTarget, RowEncoder
    from django_eventmq.contrib.spark.progress import Progress
    from django_eventmq.contrib.spark.sender import PipelinedSender, QueueCounts
    from django_eventmq.contrib.spark.session import local_session

__all__ = [
    "EnqueueResult",
    "JobTarget",
    "PipelinedSender",
    "Progress",
    "QueueCounts",
    "RowEncoder",
    "enqueue_dataframe",
    "jobs_dataframe",
    "local_session",
]

_WHERE = {
    "EnqueueResult": "driver",
    "enqueue_dataframe": "driver",
    "jobs_dataframe": "driver",
    "JobTarget": "encoding",
    "RowEncoder": "encoding",
    "Progress": "progress",
    "PipelinedSender": "sender",
    "QueueCounts": "sender",
    "local_session": "session",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
