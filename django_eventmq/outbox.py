"""The transactional outbox on the Django ORM (:class:`~.models.OutboxJob` rows).

:class:`TableOutbox` is what ``.delay_on_commit()`` of an ``outbox`` job
writes through (installed by :mod:`.hooks`): the row in the caller's
transaction on the default database, deleted once the router acknowledged
the job. :class:`DjangoOutboxStore` is what the relay in ``emq_scheduler``
(:mod:`django_eventmq.scheduling.relay`) reads and deletes. See
docs/durability.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.utils import timezone

from django_eventmq.models.outbox import OutboxJob
from django_eventmq.schedule_database import _db
from django_eventmq.scheduling.relay import OutboxRow


class TableOutbox:
    """Keeps a job's row in the current transaction of the default database."""

    def keep(self, msgid: str, queue: str, headers: str, body: str) -> None:
        OutboxJob.objects.create(
            msgid=msgid, queue=queue, headers=headers, body=body, created=timezone.now()
        )

    def sent(self, msgid: str) -> None:
        OutboxJob.objects.filter(msgid=msgid).delete()


class DjangoOutboxStore:
    """The relay's view of the table: the rows due, and deleting those answered."""

    @_db
    def due(self, before: datetime, limit: int) -> list[OutboxRow]:
        rows = OutboxJob.objects.filter(created__lt=before).order_by("created")[:limit]
        return [OutboxRow(*row) for row in rows.values_list("msgid", "queue", "headers", "body")]

    @_db
    def delete(self, msgids: Sequence[str]) -> None:
        OutboxJob.objects.filter(msgid__in=list(msgids)).delete()
