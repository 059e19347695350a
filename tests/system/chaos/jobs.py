"""The chaos tests' job: it appends its token (the REQUEST's msgid) to a file."""

from __future__ import annotations

import os
import time

from django_eventmq.client.jobs import job

#: Environment variable naming the file every run appends to.
RECORD_ENV = "EMQ_CHAOS_RECORD"


@job
def record(token: str, work: float = 0.0) -> None:
    """Append ``token`` and a newline (one O_APPEND write: lines never interleave)."""
    if work:
        time.sleep(work)  # stands for the job's own work, so kills land mid-job
    fd = os.open(os.environ[RECORD_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{token}\n".encode())
    finally:
        os.close(fd)
