"""The outbox tests' job: a line appended per run, which the test counts."""

from __future__ import annotations

from django_eventmq import job
from tests.system.e2e.append import append_line


@job(outbox=True)
def note(log: str, tag: str) -> str:
    """Append ``tag`` to ``log``: one line per run."""
    append_line(log, tag)
    return tag
