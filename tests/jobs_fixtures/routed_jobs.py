"""Jobs whose queue ``ROUTES`` decides (tests/client/test_routes_e2e.py); each returns
the queue it ran from (``current_job().queue``)."""

from __future__ import annotations

from django_eventmq import current_job
from django_eventmq.client.jobs import job

MODULE = __name__


def _queue() -> str:
    context = current_job()
    assert context is not None
    return context.queue


@job(reply_requested=True)
def send_welcome() -> str:
    return _queue()


@job(reply_requested=True)
def charge() -> str:
    return _queue()


@job(reply_requested=True)
def tidy() -> str:
    return _queue()


@job(queue="pinned", reply_requested=True)
def send_pinned() -> str:
    """Names its queue: ROUTES do not move it."""
    return _queue()
