"""A job after which its process takes a while to exit (no thread holds it: it is slow)."""

from __future__ import annotations

import atexit
import time

from django_eventmq.client.jobs import job


def _linger(seconds: float) -> None:
    time.sleep(seconds)  # the exiting process's own pace: a slow shutdown


@job
def slow_exit(seconds: float) -> float:
    """Make this process spend ``seconds`` exiting; returns them."""
    atexit.register(_linger, seconds)
    return seconds
