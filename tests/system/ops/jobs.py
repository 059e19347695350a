"""Jobs the ops tests queue: one that returns at once, one that waits for a file."""

from __future__ import annotations

import os
import time

from django_eventmq.client.jobs import job


@job
def noop(n: int = 0) -> int:
    return n


@job
def hold(flag: str, limit: float = 30.0) -> None:
    """Stay in flight until ``flag`` exists (so a test sees a job in flight), at most ``limit``."""
    deadline = time.monotonic() + limit
    while not os.path.exists(flag) and time.monotonic() < deadline:
        time.sleep(0.02)  # the job's own work: waiting for the test's go-ahead


@job
def boom(what: str = "boom") -> None:
    """Always fails, so a result row with an error is written."""
    raise ValueError(f"{what}: the dashboard test's failing job")


@job
def flaky(marker: str) -> str:
    """Fails the first time (leaving ``marker``), succeeds the next: one retry."""
    if not os.path.exists(marker):
        with open(marker, "w"):
            pass
        raise RuntimeError("flaky: the first attempt fails")
    return "second attempt"


@job
def hold_noting_pid(flag: str, pidfile: str, limit: float = 60.0) -> None:
    """:func:`hold`, after writing its worker process's pid to ``pidfile``."""
    with open(pidfile + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(pidfile + ".tmp", pidfile)  # whole or absent, never half written
    hold(flag, limit)
