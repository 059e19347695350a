"""A job that runs until the test opens its gate, noting which process ran it."""

from __future__ import annotations

import os
import time
from pathlib import Path

from django_eventmq.client.jobs import job

#: How long a gated job waits for its gate at most (a test that forgot it).
LONGEST = 120.0


def note(log: str, line: str) -> None:
    """Append one line to ``log`` (one write: lines of several processes never mix)."""
    with open(log, "a") as f:
        f.write(line + "\n")


@job
def gated(log: str, msgid: str, gate: str) -> int:
    """Note ``start``, wait for the file ``gate``, note ``done``; returns the pid."""
    pid = os.getpid()
    note(log, f"start {msgid} {pid}")
    deadline = time.monotonic() + LONGEST
    while not Path(gate).exists() and time.monotonic() < deadline:
        time.sleep(0.01)  # the job's own pace, not a test waiting
    note(log, f"done {msgid} {pid}")
    return pid


@job
def gated_value(log: str, msgid: str, gate: str, size: int) -> str:
    """:func:`gated`, returning ``size`` characters (a big reply takes a while to send)."""
    gated(log, msgid, gate)
    return "x" * size
