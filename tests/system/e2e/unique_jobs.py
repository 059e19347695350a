"""Jobs of the unique-jobs end-to-end tests (imported by the job manager with --job-module,
and by the client processes the tests start)."""

from __future__ import annotations

from pathlib import Path

from django_eventmq.client.jobs import job
from tests.system.e2e.append import append_line


@job(unique_for=1, reply_requested=True)
def nightly(path: str) -> str:
    """At most one per second, never two at once (per path)."""
    append_line(path, "nightly")
    return "ran"


@job(unique_key=lambda account, amount, path: str(account))
def charge(account: int, amount: int, path: str) -> None:
    """One at a time per account, whatever the amount."""
    append_line(path, f"charge {account} {amount}")


@job(unique_for=0)
def rebuild(path: str) -> None:
    """Never two at once (per path); free again as soon as it ends."""
    append_line(path, "rebuild")


@job
def plain(path: str, n: int) -> None:
    """Not unique: what a reference client sends."""
    append_line(path, f"plain {n}")


def runs(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []
