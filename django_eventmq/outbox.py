"""The transactional outbox on the Django ORM (:class:`~.models.OutboxJob` rows).

:class:`TableOutbox` is what ``.delay_on_commit()`` of an ``outbox`` job
writes through (installed by :mod:`.hooks`): the row in the caller's
transaction on the default database, deleted once the router acknowledged
the job. What the relay in ``emq_scheduler`` reads and deletes is
:class:`~django_eventmq.schedule_database.DjangoOutboxStore`, with the rest of
the scheduler's database. See docs/durability.md.
"""

from __future__ import annotations

from django.utils import timezone

from django_eventmq.models.outbox import OutboxJob


class TableOutbox:
    """Keeps a job's row in the current transaction of the default database."""

    def keep(self, msgid: str, queue: str, headers: str, body: str) -> None:
        OutboxJob.objects.create(
            msgid=msgid, queue=queue, headers=headers, body=body, created=timezone.now()
        )

    def sent(self, msgid: str) -> None:
        OutboxJob.objects.filter(msgid=msgid).delete()
