"""Jobs of the expiry end-to-end tests (imported by the job manager with --job-module)."""

from __future__ import annotations

import time
from pathlib import Path

from django_eventmq.client.jobs import job


@job(guarantee=True, reply_requested=True, expires=600)
def note_run(path: str) -> str:
    """Write when it ran, so a test can tell whether it ran at all."""
    with Path(path).open("a") as fh:
        fh.write(f"ran {time.time()!r}\n")
    return "ran"
