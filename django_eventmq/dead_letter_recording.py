"""Dead letters as the worker records them: one kept for each job given up.

A job manager's ``failed``/``timed_out`` results row (its last attempt
failed or timed out) gets a :class:`~django_eventmq.models.DeadLetter`
beside it, which stays when the results row is purged.
:func:`~django_eventmq.result_recording.record_results` calls
:func:`record_dead` after each batch. Sending dead letters again and the
routers' poisoned jobs are :mod:`.dead_letters` (the web side).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django_eventmq.models.dead_letters import DeadLetter, DeadLetterReason
from django_eventmq.protocol.status import JobStatus

#: A given-up job's results status (only job managers write them) -> its reason.
_REASON_OF = {
    JobStatus.FAILED.value: DeadLetterReason.FAILED,
    JobStatus.TIMED_OUT.value: DeadLetterReason.TIMED_OUT,
}


def record_dead(rows: Iterable[Mapping[str, Any]]) -> int:
    """Keep a dead letter for each row of a job manager that says its job was given up;
    returns how many rows said so (a msgid kept already is not written again)."""
    # A job a router set aside (poisoned) is listed from that router's journal.
    dead = [
        row
        for row in rows
        if row["status"] in _REASON_OF and row["jobmanager"] and not row.get("poisoned")
    ]
    if not dead:
        return 0
    came_from = dict(
        DeadLetter.objects.filter(retried_msgid__in=[row["msgid"] for row in dead]).values_list(
            "retried_msgid", "msgid"
        )
    )
    DeadLetter.objects.bulk_create(
        [
            DeadLetter(
                msgid=row["msgid"],
                reason=_REASON_OF[row["status"]],
                queue=row["queue"],
                job=row["job"],
                args=row["args"],
                kwargs=row["kwargs"],
                headers=dict(row.get("options") or {}),
                exc_type=row["exc_type"],
                exc_message=row["exc_message"],
                traceback=row["traceback"],
                attempts=row["attempts"],
                jobmanager=row["jobmanager"],
                created=row["finished"] or row["updated"],
                retry_of=came_from.get(row["msgid"], ""),
            )
            for row in dead
        ],
        ignore_conflicts=True,
    )
    return len(dead)
