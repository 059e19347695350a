"""Jobs the streaming tests queue (module-level, so worker children can import them)."""

from __future__ import annotations

import os
import time
from collections.abc import Generator
from typing import Any

from django_eventmq import job, progress


@job(reply_requested=True)
def count_up(
    label: str, n: int, pause: float = 0.0
) -> Generator[dict[str, Any], None, dict[str, Any]]:
    """A generator job: yields ``{"label", "i"}`` for i < n, returns the total."""
    for i in range(n):
        if i and pause:
            time.sleep(pause)  # the job's own work between two partials
        yield {"label": label, "i": i}
    return {"label": label, "total": n}


@job(reply_requested=True)
def long_job(steps: int, pause: float) -> str:
    """Reports its progress as a fraction after each step of work."""
    for step in range(1, steps + 1):
        time.sleep(pause)  # one step of work
        progress({"step": step, "of": steps})
    return "finished"


@job(reply_requested=True)
def chatty(n: int) -> int:
    """Reports progress as fast as it can: most reports are coalesced."""
    for i in range(n):
        progress(i)
    return n


@job(reply_requested=True)
def bad_progress() -> str:
    progress(object())  # not JSON: SerializationError, raised in the job
    return "unreachable"


@job(reply_requested=True)
def hold_at(release: str, label: str) -> str:
    """Reports ``label`` as progress, then waits until the file ``release`` exists."""
    progress({"at": label})
    deadline = time.monotonic() + 60
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.02)
    progress({"at": f"{label} released"})
    return "released"


def not_a_job() -> str:
    """Importable but not registered with @job: a job manager refuses to run it."""
    return "must never run"
