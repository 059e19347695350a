"""A job that leaves a non-daemon thread running: its process cannot exit normally."""

from __future__ import annotations

import threading

from django_eventmq.client.jobs import job

#: Never set: the thread waits for good (multiprocessing's exit waits for it).
_never = threading.Event()


@job
def linger() -> str:
    """Start a non-daemon thread that never ends; returns its name."""
    thread = threading.Thread(target=_never.wait, name="lingering", daemon=False)
    thread.start()
    return thread.name
