"""Jobs of the delay end-to-end tests (imported by the job manager with --job-module)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from django_eventmq.client.jobs import job


def _note(path: str, what: str) -> None:
    with Path(path).open("a") as fh:
        fh.write(f"{what} {time.time()!r} {os.getpid()}\n")


@job(guarantee=True, reply_requested=True)
def note_start(path: str) -> str:
    """Write when it started (unix time), so a test can compare it with the due time."""
    _note(path, "start")
    return "ran"


@job(timeout=1, reply_requested=True)
def stall(path: str, seconds: float) -> str:
    """Note the start, then outlast the decorator's 1 s timeout (unless it is lost)."""
    _note(path, "start")
    time.sleep(seconds)
    _note(path, "done")
    return "finished"
