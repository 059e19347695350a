"""Jobs of the outbox tests: one that always uses the outbox, one that never does."""

from __future__ import annotations

from django_eventmq import job


@job(outbox=True)
def boxed(n: int) -> int:
    return n


@job(outbox=False)
def unboxed(n: int) -> int:
    return n
