"""The failover tests' job: writes ``start TOKEN`` when it begins and ``end TOKEN`` when it ends."""

from __future__ import annotations

import os
import time

from django_eventmq.client.jobs import job

#: Environment variable naming the file every run appends to.
RECORD_ENV = "EMQ_HA_RECORD"


def _line(text: str) -> None:
    # One O_APPEND write per line: lines of concurrent runs never interleave.
    fd = os.open(os.environ[RECORD_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{text}\n".encode())
    finally:
        os.close(fd)


@job
def record(token: str, work: float = 0.0, until: str | None = None) -> None:
    """``start token``, ``work`` seconds of the job's own work, ``end token``.

    With ``until`` (a file name) the work ends as soon as that file exists, at
    the latest after ``work`` seconds: a test says when its long job may end.
    """
    _line(f"start {token}")
    deadline = time.monotonic() + work
    if until is None:
        if work:
            time.sleep(work)  # stands for the job's own work
    else:
        while not os.path.exists(until) and time.monotonic() < deadline:
            time.sleep(0.01)
    _line(f"end {token}")
