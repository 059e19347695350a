"""The scheduler's database on the Django ORM: schedules, their runs, old results,
and the outbox rows its relay sends.

:class:`DjangoScheduleDatabase` implements
:class:`~django_eventmq.scheduling.scheduler.ScheduleDatabase`;
:class:`DjangoOutboxStore` is the relay's view of the outbox table
(:class:`~django_eventmq.scheduling.relay.OutboxStore`; web processes write it
through :mod:`.outbox`).

A run is claimed by inserting a :class:`ScheduleRun` row; the unique
``(schedule, fire_time)`` constraint makes that race-free on PostgreSQL and
SQLite alike, so two schedulers never both send one run. Also syncs the
schedules declared in code (``@job(schedule=...)``) into the table.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime
from functools import wraps
from typing import Any, TypeVar

from django.db import DatabaseError, IntegrityError, close_old_connections, connection, transaction
from django.db.models import F

from django_eventmq.client.jobs import Job
from django_eventmq.models.outbox import OutboxJob
from django_eventmq.models.schedules import Schedule, ScheduleRun
from django_eventmq.protocol import Headers, parse_headers
from django_eventmq.results import expire_results
from django_eventmq.scheduling.identity import ScheduleSpec, job_body, schedule_identity
from django_eventmq.scheduling.relay import OutboxRow
from django_eventmq.scheduling.scheduler import ScheduleState
from django_eventmq.scheduling.timing import DuePlan, Periodic

logger = logging.getLogger("django_eventmq.scheduler")

T = TypeVar("T")


def _db(method: Callable[..., T]) -> Callable[..., T]:
    """Drop a broken database connection so the next call reconnects."""

    @wraps(method)
    def call(*args: Any, **kwargs: Any) -> T:
        close_old_connections()
        try:
            return method(*args, **kwargs)
        except DatabaseError:
            if not connection.in_atomic_block:
                connection.close()
            raise

    return call


def to_state(row: Schedule) -> ScheduleState:
    """The scheduler's view of a row."""
    return ScheduleState(
        id=row.pk,
        queue=row.queue,
        headers=parse_headers(row.headers),
        body_text=row.job_body().encode(),
        timing=row.timing(),
        next_run=row.next_run,
        runs_left=row.runs_left,
        revision=row.revision,
        name=str(row),
    )


class DjangoScheduleDatabase:
    """Schedules in :class:`Schedule` rows, claims in :class:`ScheduleRun` rows."""

    @_db
    def versions(self) -> dict[int, int]:
        rows = Schedule.objects.filter(enabled=True, next_run__isnull=False)
        return dict(rows.values_list("pk", "revision"))

    @_db
    def load(self, ids: Collection[int]) -> list[ScheduleState]:
        states = []
        for row in Schedule.objects.filter(pk__in=list(ids), enabled=True):
            try:
                states.append(to_state(row))
            except ValueError as exc:  # edited into something invalid outside the admin
                logger.warning("scheduler: schedule %s (id %s) ignored: %s", row, row.pk, exc)
        return states

    @_db
    def upsert(self, spec: ScheduleSpec, now: datetime) -> ScheduleState | None:
        return upsert_spec(spec, source=Schedule.Source.API, now=now)

    @_db
    def remove(self, spec: ScheduleSpec) -> int:
        rows = Schedule.objects.filter(job_key=spec.job_key)
        if spec.timing is not None:
            rows = rows.filter(key=spec.key)
        deleted, _ = rows.delete()
        return int(deleted)

    @_db
    def claim(self, schedule_id: int, fire_time: datetime, msgid: str, claimed_by: str) -> bool:
        try:
            with transaction.atomic():
                ScheduleRun.objects.create(
                    schedule_id=schedule_id,
                    fire_time=fire_time,
                    msgid=msgid,
                    claimed_by=claimed_by[:100],
                )
        except IntegrityError:
            # Taken by another scheduler - or the schedule was deleted meanwhile.
            return False
        return True

    @_db
    def record_fire(
        self,
        state: ScheduleState,
        fired: Sequence[tuple[datetime, str]],
        plan: DuePlan,
        now: datetime,
    ) -> None:
        with transaction.atomic():
            row = Schedule.objects.select_for_update().filter(pk=state.id).first()
            if row is None:
                return
            changes: dict[str, Any] = {"revision": F("revision") + 1}
            if fired:
                last_time, last_msgid = fired[-1]
                changes["total_runs"] = F("total_runs") + len(fired)
                changes["last_msgid"] = last_msgid
                if row.last_run is None or last_time > row.last_run:
                    changes["last_run"] = last_time
            if row.revision == state.revision or state.revision < 0:
                # Nobody edited the row since we loaded it: the plan stands.
                changes["next_run"] = plan.next_run
                changes["runs_left"] = plan.runs_left
                if plan.finished:
                    changes["enabled"] = False
            elif fired and row.runs_left is not None:
                changes["runs_left"] = max(0, row.runs_left - len(fired))
            Schedule.objects.filter(pk=state.id).update(**changes)

    @_db
    def record_result(self, msgid: str, payload: str) -> None:
        ScheduleRun.objects.filter(msgid=msgid).update(result=payload[:10_000])

    @_db
    def prune(self, before: datetime) -> int:
        deleted, _ = ScheduleRun.objects.filter(fire_time__lt=before).delete()
        return int(deleted)

    @_db
    def expire_results(self, before: datetime, batch: int) -> int:
        return expire_results(before, batch)


def upsert_spec(spec: ScheduleSpec, *, source: str, now: datetime) -> ScheduleState | None:
    """Create the schedule ``spec`` names, or update its queue, headers and options.

    An existing schedule keeps its next run (scheduling it again must not
    fire it again), its source, and ``enabled`` as the admin left it.
    """
    assert spec.timing is not None
    timing = spec.timing
    body = spec.body
    with transaction.atomic():
        row = Schedule.objects.select_for_update().filter(key=spec.key).first()
        if row is None:
            row = Schedule(
                source=source,
                path=body.path,
                callable=body.callable,
                args=list(body.args),
                kwargs=dict(body.kwargs),
                class_args=list(body.class_args),
                class_kwargs=dict(body.class_kwargs),
                interval=timing.interval,
                cron=timing.cron or "",
                timezone=timing.timezone if timing.cron else "UTC",
                nohaste=spec.nohaste,
                run_count=spec.run_count,
            )
        row.queue = spec.queue
        row.headers = spec.headers.encode()
        row.nohaste = spec.nohaste
        if row.run_count != spec.run_count:
            row.run_count = spec.run_count
        row.save(now=now)
    if not row.enabled or row.next_run is None:
        return None
    return to_state(row)


def sync_declared(
    declared: Iterable[tuple[Job[Any, Any], Periodic]], *, now: datetime
) -> tuple[int, int]:
    """Make the ``source=code`` rows match the schedules declared in code.

    Returns ``(kept_or_created, removed)``. Rows declared no longer are
    deleted; an admin's ``enabled`` choice on a declared row is kept.
    """
    keys: list[str] = []
    for job, periodic in declared:
        body = job_body(job, periodic.args, dict(periodic.kwargs))
        headers = job.headers if isinstance(job.headers, Headers) else Headers()
        # A unique job's runs carry its key for these arguments.
        args, kwargs = tuple(periodic.args), dict(periodic.kwargs)
        headers = job.unique_headers(headers, args, kwargs) or headers
        spec = ScheduleSpec(
            body=body,
            queue=job.queue,
            headers=headers,
            timing=periodic.timing,
            nohaste=periodic.nohaste,
            run_count=periodic.run_count,
        )
        upsert_spec(spec, source=Schedule.Source.CODE, now=now)
        keys.append(schedule_identity(body, periodic.timing))
    removed, _ = Schedule.objects.filter(source=Schedule.Source.CODE).exclude(key__in=keys).delete()
    return len(keys), int(removed)


# -- the outbox relay's table ------------------------------------------------------------
class DjangoOutboxStore:
    """The relay's view of the table: the rows due, and deleting those answered."""

    @_db
    def due(self, before: datetime, limit: int) -> list[OutboxRow]:
        rows = OutboxJob.objects.filter(created__lt=before).order_by("created")[:limit]
        return [OutboxRow(*row) for row in rows.values_list("msgid", "queue", "headers", "body")]

    @_db
    def delete(self, msgids: Sequence[str]) -> None:
        OutboxJob.objects.filter(msgid__in=list(msgids)).delete()


__all__ = ["DjangoOutboxStore", "DjangoScheduleDatabase", "sync_declared", "upsert_spec"]
