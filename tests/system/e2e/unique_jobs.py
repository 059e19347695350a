"""Jobs of the unique-jobs end-to-end tests (imported by the job manager with --job-module,
and by the client processes the tests start)."""

from __future__ import annotations

import os
from pathlib import Path

from django_eventmq.client.jobs import job


def _note(path: str, line: str) -> None:
    # One write on an O_APPEND descriptor: lines from concurrent workers never interleave.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


@job(unique_for=1, reply_requested=True)
def nightly(path: str) -> str:
    """At most one per second, never two at once (per path)."""
    _note(path, "nightly")
    return "ran"


@job(unique_key=lambda account, amount, path: str(account))
def charge(account: int, amount: int, path: str) -> None:
    """One at a time per account, whatever the amount."""
    _note(path, f"charge {account} {amount}")


@job(unique_for=0)
def rebuild(path: str) -> None:
    """Never two at once (per path); free again as soon as it ends."""
    _note(path, "rebuild")


@job
def plain(path: str, n: int) -> None:
    """Not unique: what a reference client sends."""
    _note(path, f"plain {n}")


def runs(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []
