"""Sending when the caller's database transaction commits (``delay_on_commit``, the
outbox, workflows): at once when none is open, never when it rolls back."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from django_eventmq.errors import EventMQError

logger = logging.getLogger("django_eventmq.client")
T = TypeVar("T")


def send_at_commit(
    on_commit: Callable[[Callable[[], object]], T],
    send: Callable[[], object],
    what: str,
    then: str,
    failed: Callable[[Exception], None] | None = None,
) -> T:
    """Call ``send`` when the open transaction commits (``on_commit``, whose answer
    is returned); at once with none open, its error then the caller's. At the commit
    an error is logged, with ``what`` was not sent and ``then`` what to do, and
    given to ``failed``, not raised: raised there it would end Django's run of the
    transaction's callbacks, and what was queued after it would never be sent."""
    at_once = True  # on_commit calls it before returning when no transaction is open

    def run() -> None:
        try:
            send()
        except Exception as exc:
            if at_once:
                raise
            if failed is not None:
                failed(exc)
            logger.error(
                "%s was not sent when its transaction committed: %s: %s. The "
                "transaction's writes are committed; %s",
                what,
                type(exc).__name__,
                exc,
                then,
                exc_info=not isinstance(exc, EventMQError),
            )

    answer = on_commit(run)
    at_once = False
    return answer
