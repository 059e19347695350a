"""Jobs of the lease end-to-end tests (imported by the job manager with --job-module)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from django_eventmq.client.jobs import job


def note(path: str, what: str) -> None:
    """Append ``what`` and the time to ``path`` (one line per run)."""
    with Path(path).open("a") as fh:
        fh.write(f"{what} {time.time()!r}\n")


@job(guarantee=True, timeout=120)
def long(path: str, gate: str, seconds: float) -> None:
    """Note the start, wait (a minute at most) for the file ``gate``, then run ``seconds`` more."""
    note(path, "long-start")
    deadline = time.monotonic() + 60
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(seconds)
    note(path, "long-end")


@job(guarantee=True, timeout=1)
def short(path: str, what: str) -> None:
    """Note one run of ``what``; its lease is short (its ``timeout`` of 1 s + LEASE_GRACE)."""
    note(path, what)
