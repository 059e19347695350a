"""A job with schedules declared in code (``@job(schedule=...)``), for the start-up sync test.

Only the scheduler and job manager processes of ``test_processes.py`` import
this module (``EMQ_JOB_MODULES`` / ``--job-module``): importing it declares
its schedules, which the test process must not hold. Each run appends a line
to ``$EMQ_TEST_TRACE_DIR/<name>``.
"""

from __future__ import annotations

import os
from pathlib import Path

from django_eventmq.client.jobs import job
from django_eventmq.scheduling.timing import crontab, every

#: Where the runs leave their trace (set by the test for the job manager).
TRACE_DIR_ENV = "EMQ_TEST_TRACE_DIR"


@job(
    schedule=[
        every(1, args=["every-second"]),
        crontab("0 3 * * *", timezone="Europe/Berlin", args=["nightly"]),
    ]
)
def declared_touch(name: str) -> str:
    """Append this worker's pid to the trace file ``name``."""
    with (Path(os.environ[TRACE_DIR_ENV]) / name).open("a") as handle:
        handle.write(f"{os.getpid()}\n")
    return name
