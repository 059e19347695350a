"""Jobs of the dead-letter end-to-end tests (module-level, so job-manager workers import them).

Each one misbehaves until the file ``fixed`` exists: the test creates it before it
retries the job from the admin, and the retry then succeeds.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from django_eventmq import job


@job(reply_requested=True, retry_count=1)
def fails_until_fixed(fixed: str, runs: str) -> str:
    """Raises (each run noted in ``runs``) until ``fixed`` exists."""
    with open(runs, "a") as f:
        f.write(f"run {os.getpid()}\n")
    if not Path(fixed).exists():
        raise RuntimeError("not fixed yet")
    return "fixed"


@job(reply_requested=True, guarantee=True)
def kills_its_worker_until_fixed(fixed: str, runs: str) -> str:
    """Kills its own worker process (as a segfault would) until ``fixed`` exists."""
    with open(runs, "a") as f:
        f.write(f"run {os.getpid()}\n")
    if not Path(fixed).exists():
        os.kill(os.getpid(), signal.SIGKILL)
    return "fixed"
