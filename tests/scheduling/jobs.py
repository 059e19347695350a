"""Jobs the scheduler tests run: each leaves a trace a test can see."""

from __future__ import annotations

import os
from pathlib import Path

from django_eventmq.client.jobs import job


@job
def touch(path: str) -> str:
    """Append a line to ``path`` (one line per run)."""
    with Path(path).open("a") as handle:
        handle.write(f"{os.getpid()}\n")
    return path
