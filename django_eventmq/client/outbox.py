"""The outbox on the client: ``delay_on_commit`` of a job with ``@job(outbox=True)``
(or ``OUTBOX``) writes the job's row in the caller's transaction first, sends
it at the commit, guaranteed, and deletes the row once the router
acknowledged it (docs/durability.md). A row left (this process died, the
router was down) is sent by a scheduler (``scheduling/relay.py``); the router
takes its msgid once.

The path a job takes at the commit (:mod:`.stages`): "acknowledged" deletes the row.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django_eventmq.client.commit import send_at_commit
from django_eventmq.client.handles import CommitHandle
from django_eventmq.errors import ConfigurationError, JobRejected
from django_eventmq.protocol import Headers
from django_eventmq.protocol.status import refused_for_now
from django_eventmq.runtime import hooks

logger = logging.getLogger("django_eventmq.client")


def from_options(qualname: str, fields: dict[str, Any]) -> bool | None:
    """``@job(outbox=)``: whether the job's ``delay_on_commit`` goes through the outbox
    (None: the ``OUTBOX`` setting decides); takes it out of ``fields``."""
    outbox = fields.pop("outbox", None)
    if outbox is not None and not isinstance(outbox, bool):
        raise ConfigurationError(f"@job {qualname}: outbox= takes True, False or None")
    return outbox


def send_through(
    on_commit: hooks.OnCommit,
    send: Callable[[Headers], object],
    name: str,
    queue: str,
    headers: Headers,
    body_text: str,
    msgid: str,
    handle: CommitHandle,
) -> None:
    """Keep job ``name``'s row now (``headers``: guaranteed), and at the commit
    ``send(headers)`` it and delete the row once acknowledged; ``handle`` says how
    it went."""
    box = hooks.outbox()
    box.keep(msgid, queue, headers.encode(), body_text)

    def kept(exc: Exception) -> None:
        # Not raised, even with no transaction open: the row is committed and will
        # be sent; a caller that sent the job again would send it twice.
        handle.kept(exc)
        logger.warning(
            "job %s msgid=%s was not sent (%s: %s); its outbox row stays and a "
            "scheduler (emq_scheduler) sends it",
            name,
            msgid,
            type(exc).__name__,
            exc,
        )

    def send_now() -> None:
        try:
            send(headers)
        except JobRejected as exc:
            if not refused_for_now(exc.reason):
                box.sent(msgid)  # refused for good: a relay would be refused too
                raise
            kept(exc)
            return
        except Exception as exc:
            kept(exc)
            return
        handle.sent()
        acknowledged(box, name, msgid)

    handle.pending = send_at_commit(
        on_commit,
        send_now,
        f"job {name} msgid={msgid}",
        "the router refused it, so it will not run",
        failed=handle.not_sent,
    )


def acknowledged(box: hooks.Outbox, name: str, msgid: str) -> None:
    """The router acknowledged job ``msgid``: its row goes."""
    try:
        box.sent(msgid)
    except Exception as exc:  # sent: a relay sends it again, the router takes it once
        logger.warning(
            "job %s msgid=%s was sent but its outbox row was not deleted (%s: %s)",
            name,
            msgid,
            type(exc).__name__,
            exc,
        )
