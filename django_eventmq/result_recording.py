"""Writing the job results table: outcome records become rows.

Job-manager workers (``worker_hooks.py``) hand :func:`record_results` a batch of outcome records;
the batch becomes ONE ``INSERT ... ON CONFLICT (msgid) DO UPDATE`` statement
(SQLite and PostgreSQL share the syntax), so recording results costs one
round trip per batch, not per job.

Records can arrive late or twice (batches from different worker processes,
a retry on another job manager), so the upsert only lets a record replace
the row when it is *newer*, ordered by attempt first: a higher attempt
always wins and an earlier one never does, whichever process ran it (a
retry may run in a process that ran an earlier attempt). Within one attempt
a record of the same run wins when it is further along (queued < running <
retrying < finished). A row written by a job manager is never overwritten by
one written by a client (the Tasks backend's ``queued`` row, a cancellation
of a queued job).

Each run of a job has its worker process (``jobmanager:pid``), listed in
``workers`` in order (a process again when it differs from the last one
listed). Within one attempt, a record of a process not listed yet (the job
handed out again after its worker process or job manager died, which keeps
its attempt number) replaces the row and is added to the list, unless it
started before the row's run (the first run's job manager wrote late); a
late record of a run that is no longer the last one is ignored.

``progress`` (a running job's last partial, :mod:`.jobmanager.progress`) arrives
in ``running`` records of the same batches: such a record refreshes a
``running`` row of the same attempt, and a record without progress keeps the
row's, so a finished row shows the last progress reported.

A client writes its own rows of a job (:func:`record_queued`,
:func:`record_cancel`, :func:`record_expired`) through the same upsert, so
its rules order them too. Reading and deleting rows is :mod:`.results`.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import connections, router
from django.db.models import Field
from django.db.models.fields.reverse_related import ForeignObjectRel
from django.utils import timezone

from django_eventmq.models.results import JobResult
from django_eventmq.protocol.status import (
    EXPIRED_ERROR,
    RESULT_OF,
    RESULT_STATUSES,
    JobStatus,
)
from django_eventmq.runtime.registry import canonical_name

#: The results logger of docs/operations.md, for reading and writing alike.
logger = logging.getLogger("django_eventmq.results")

#: A job manager's row with one of these statuses is a job given up: a dead letter.
DEAD_STATUSES = frozenset({JobStatus.FAILED.value, JobStatus.TIMED_OUT.value})

#: The dispatcher job of the Tasks backend; its records describe the task it ran.
#: Records may name it by its old name too (``registry.ALIASES``): both count.
TASK_RUNNER = "django_eventmq.tasks_runner.run_task"
#: The workflow step runner (``client/workflows.py``); its records describe the member.
WORKFLOW_RUNNER = "django_eventmq.jobs.run_workflow_step"

#: Status words a record may use, including the DONE statuses of the wire.
_STATUS_ALIASES: dict[str, str] = {
    **{status.value: status.value for status in RESULT_STATUSES},
    **{done.value: status.value for done, status in RESULT_OF.items()},
}
_RANK = {
    JobStatus.QUEUED.value: 0,
    JobStatus.RUNNING.value: 1,
    JobStatus.RETRYING.value: 2,
}
_FINISHED_RANK = 3

COLUMNS = (
    "msgid",
    "queue",
    "job",
    "args",
    "kwargs",
    "status",
    "value",
    "progress",
    "exc_type",
    "exc_message",
    "traceback",
    "attempts",
    "jobmanager",
    "pid",
    "workers",
    "enqueued",
    "started",
    "finished",
    "duration",
    "created",
    "updated",
)


def _concrete(field: Field[Any, Any] | ForeignObjectRel) -> Field[Any, Any]:
    if isinstance(field, ForeignObjectRel):  # COLUMNS names no relation; a guard for mypy
        raise TypeError(f"{field.name} is a relation, not a column")
    return field


def _rank(status: str) -> int:
    return _RANK.get(status, _FINISHED_RANK)


def _when(stamp: object) -> datetime | None:
    if stamp is None or stamp == "":
        return None
    if isinstance(stamp, datetime):
        return stamp
    return datetime.fromtimestamp(float(stamp), tz=UTC)  # type: ignore[arg-type]


def normalise(record: Mapping[str, Any], now: datetime) -> dict[str, Any] | None:
    """A row's column values from one outcome record; ``None`` (logged) if unusable."""
    msgid = record.get("msgid")
    status = _STATUS_ALIASES.get(str(record.get("status", "")))
    if not isinstance(msgid, str) or not msgid or status is None:
        logger.warning(
            "ignored a job result record without a msgid or with an unknown status: "
            "msgid=%r status=%r job=%r",
            msgid,
            record.get("status"),
            record.get("job"),
        )
        return None
    job = str(record.get("job") or "")
    args: Any = record.get("args") or []
    kwargs: Any = record.get("kwargs") or {}
    error = record.get("error") or {}
    if not isinstance(error, Mapping):
        error = {"type": "Error", "message": str(error)}
    exc_type = error.get("type")
    if job == WORKFLOW_RUNNER and isinstance(args, list | tuple) and len(args) >= 3:
        job, args, kwargs = str(args[0]), args[1], args[2]  # (job, args, kwargs, place)
    elif canonical_name(job) == TASK_RUNNER and isinstance(args, list | tuple) and len(args) >= 3:
        # Show the task, not the dispatcher that ran it: run_task(path, args, kwargs, ...);
        # and its exception as Django's TaskError wants it, module.qualname.
        job, args, kwargs = str(args[0]), args[1], args[2]
        exc_type = error.get("path") or exc_type
    jobmanager, pid = str(record.get("jobmanager") or ""), record.get("pid")
    started, finished = _when(record.get("started")), _when(record.get("finished"))
    duration = (finished - started).total_seconds() if started and finished else None
    return {
        "msgid": msgid,
        "queue": str(record.get("queue") or ""),
        "job": job,
        "args": list(args) if isinstance(args, list | tuple) else [args],
        "kwargs": dict(kwargs) if isinstance(kwargs, Mapping) else {},
        "status": status,
        "value": record.get("value") if status == JobStatus.SUCCEEDED else None,
        "progress": record.get("progress"),
        "exc_type": str(exc_type or ""),
        "exc_message": str(error.get("message") or ""),
        "traceback": str(error.get("traceback") or ""),
        "attempts": int(record.get("attempt") or 0),
        "jobmanager": jobmanager,
        "pid": pid,
        "workers": [f"{jobmanager}:{pid}"] if jobmanager and pid is not None else [],
        "enqueued": _when(record.get("enqueued")),
        "started": started,
        "finished": finished,
        "duration": duration,
        "created": now,
        "updated": now,
        # Not columns: the job's options, kept by a dead letter (:mod:`.dead_letter_recording`),
        # and whether a router set it aside (its journal keeps it: no dead letter).
        "options": record.get("options") or {},
        "poisoned": bool(record.get("poisoned")),
    }


def _not_earlier(row: Mapping[str, Any], seen: Mapping[str, Any]) -> bool:
    """``row``'s run (of the same attempt) did not start before ``seen``'s."""
    return row["started"] is None or seen["started"] is None or row["started"] >= seen["started"]


def _supersedes(row: Mapping[str, Any], seen: Mapping[str, Any]) -> bool:
    """``row`` is newer than ``seen`` (of the same msgid); the upsert's rules, in Python.

    The attempt first; of one attempt, another run wins if it is a new one (a
    redelivery), the same run if it is as far along (the later of two equal
    records wins: a progress update).
    """
    if row["attempts"] != seen["attempts"]:
        return bool(row["attempts"] > seen["attempts"])
    ran, runs = row["workers"], seen["workers"]
    if ran and runs and ran[-1] != runs[-1]:
        return ran[-1] not in runs and _not_earlier(row, seen)
    return _rank(row["status"]) >= _rank(seen["status"])


def _runs_after(runs: list[str], ran: list[str]) -> list[str]:
    """``runs`` then ``ran``, whose first run is ``runs``' last when they overlap."""
    return runs + (ran[1:] if ran and runs and ran[0] == runs[-1] else ran)


def _newest_per_msgid(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per msgid (an upsert may not touch a row twice), the newest winning.

    Records come in the order they were made; a winner without progress keeps
    the loser's.
    """
    best: dict[str, dict[str, Any]] = {}
    for row in rows:
        seen = best.get(row["msgid"])
        if seen is None:
            best[row["msgid"]] = row
            continue
        if _supersedes(row, seen):
            row["workers"] = _runs_after(seen["workers"], row["workers"])
            if row["progress"] is None:
                row["progress"] = seen["progress"]
            if row["started"] is None and row["attempts"] == seen["attempts"]:
                row["started"] = seen["started"]
                if row["started"] and row["finished"]:
                    row["duration"] = (row["finished"] - row["started"]).total_seconds()
            best[row["msgid"]] = row
    return list(best.values())


def record_results(records: Iterable[Mapping[str, Any]], *, from_worker: bool = True) -> int:
    """Write a batch of outcome records (one statement per batch); returns rows sent.

    ``from_worker`` records (job managers) win over client-written rows; a
    record without a ``jobmanager`` is given ``"?"`` so that still holds.
    """
    now = timezone.now()
    rows = []
    for record in records:
        row = normalise(record, now)
        if row is not None:
            if from_worker and not row["jobmanager"]:
                row["jobmanager"] = "?"
            elif not from_worker:
                row["jobmanager"] = ""
            rows.append(row)
    rows = _newest_per_msgid(rows)
    if rows:
        _upsert(rows)
        if from_worker and any(row["status"] in DEAD_STATUSES for row in rows):
            from django_eventmq.dead_letter_recording import record_dead

            record_dead(rows)  # jobs given up: kept as dead letters too
        if any(row["msgid"].startswith("wf-") for row in rows):
            from django_eventmq.workflow_steps import note_outcomes

            note_outcomes(rows)  # a member failed for good fails its workflow
    return len(rows)


def _max_params(connection: Any) -> int | None:
    """How many parameters one statement may carry on ``connection``.

    Django 5.2 says 999 for any SQLite; the library's real limit (32766 since
    SQLite 3.32, what Django 6 reads) keeps a batch one statement there too.
    """
    if connection.vendor == "sqlite":
        connection.ensure_connection()
        return int(connection.connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER))
    limit: int | None = connection.features.max_query_params
    return limit


def _upsert(rows: Sequence[dict[str, Any]]) -> None:
    alias = router.db_for_write(JobResult)
    connection = connections[alias]
    # Concrete columns only (no relations), so each has get_db_prep_save().
    fields = [_concrete(JobResult._meta.get_field(name)) for name in COLUMNS]
    limit = _max_params(connection)
    per_query = max(1, limit // len(COLUMNS)) if limit else len(rows)
    sql_head, sql_tail = _upsert_sql(connection)
    row_sql = "(" + ", ".join(["%s"] * len(COLUMNS)) + ")"
    with connection.cursor() as cursor:
        for start in range(0, len(rows), per_query):
            chunk = rows[start : start + per_query]
            params: list[Any] = []
            for row in chunk:
                params.extend(
                    field.get_db_prep_save(row[field.name], connection) for field in fields
                )
            cursor.execute(sql_head + ", ".join([row_sql] * len(chunk)) + sql_tail, params)


#: The ``workers`` list in SQL, per database: ``new`` (the record's last run is
#: not in the row's list), ``last`` (the record is of the row's last run, or of
#: none), ``merge`` (the row's list, then the record's, less its first run when
#: that is the row's last).
_RUNS_SQL = {
    "sqlite": {
        "new": "json_extract({x}, '$[#-1]') NOT IN (SELECT value FROM json_each({t}))",
        "last": "(json_array_length({x}) = 0 OR json_array_length({t}) = 0"
        " OR json_extract({x}, '$[#-1]') = json_extract({t}, '$[#-1]'))",
        "merge": "(SELECT json_group_array(value) FROM ("
        "SELECT 0 AS part, key, value FROM json_each({t})"
        " UNION ALL SELECT 1, r.key, r.value FROM json_each({x}) AS r"
        " WHERE NOT (r.key = 0 AND r.value IS json_extract({t}, '$[#-1]'))"
        " ORDER BY part, key))",
    },
    "postgresql": {
        "new": "NOT ({t} @> jsonb_build_array({x} -> -1))",
        "last": "(jsonb_array_length({x}) = 0 OR jsonb_array_length({t}) = 0"
        " OR {x} -> -1 = {t} -> -1)",
        "merge": "({t} || COALESCE((SELECT jsonb_agg(r.value ORDER BY r.n)"
        " FROM jsonb_array_elements({x}) WITH ORDINALITY AS r(value, n)"
        " WHERE NOT (r.n = 1 AND r.value IS NOT DISTINCT FROM {t} -> -1)), '[]'::jsonb))",
    },
}


def _upsert_sql(connection: Any) -> tuple[str, str]:
    q = connection.ops.quote_name
    table = q(JobResult._meta.db_table)

    def t(column: str) -> str:
        return f"{table}.{q(column)}"

    def x(column: str) -> str:
        return f"excluded.{q(column)}"

    def rank(status: str) -> str:
        cases = " ".join(f"WHEN '{name}' THEN {value}" for name, value in _RANK.items())
        return f"(CASE {status} {cases} ELSE {_FINISHED_RANK} END)"

    runs = _RUNS_SQL[connection.vendor]
    running = f"'{JobStatus.RUNNING.value}'"
    # Of one attempt: a record of the row's last run (or of no particular run) ...
    last_run = runs["last"].format(t=t("workers"), x=x("workers"))
    # ... or of a run not listed yet that started no earlier: a new run (the job
    # handed out again). A record of the run before it can arrive after the new
    # run's (its job manager writes late).
    new_run = (
        f"(NOT {last_run} AND {runs['new'].format(t=t('workers'), x=x('workers'))}"
        f" AND ({x('started')} IS NULL OR {t('started')} IS NULL"
        f" OR {x('started')} >= {t('started')}))"
    )
    # A client row (no job manager) never replaces a job manager's row; a
    # client row is otherwise only kept for the fields it knows.
    client = f"{x('jobmanager')} = ''"
    keep_if_client = {
        name: f"CASE WHEN {client} THEN {t(name)} ELSE {x(name)} END"
        for name in ("queue", "job", "args", "kwargs", "jobmanager")
    }
    assignments = {
        **keep_if_client,
        "status": x("status"),
        "value": x("value"),
        "progress": f"COALESCE({x('progress')}, {t('progress')})",
        "exc_type": x("exc_type"),
        "exc_message": x("exc_message"),
        "traceback": x("traceback"),
        "attempts": x("attempts"),
        "pid": f"COALESCE({x('pid')}, {t('pid')})",
        "workers": runs["merge"].format(t=t("workers"), x=x("workers")),
        "enqueued": f"COALESCE({t('enqueued')}, {x('enqueued')})",
        "started": f"COALESCE({x('started')}, {t('started')})",
        "finished": x("finished"),
        "duration": x("duration"),
        "updated": x("updated"),
    }
    # Attempts first (a retry may run in any process, one that ran an earlier
    # attempt too), then, of one attempt, the run and how far along it is.
    newer = (
        f"({t('jobmanager')} = '' OR {x('jobmanager')} <> '') AND ("
        f"({t('jobmanager')} = '' AND {x('jobmanager')} <> '')"
        f" OR {x('attempts')} > {t('attempts')}"
        f" OR ({x('attempts')} = {t('attempts')} AND ({new_run} OR ({last_run} AND ("
        f"{rank(x('status'))} > {rank(t('status'))}"
        # A progress update of a running job.
        f" OR ({x('progress')} IS NOT NULL"
        f" AND {x('status')} = {running} AND {t('status')} = {running}))))))"
    )
    head = f"INSERT INTO {table} ({', '.join(q(c) for c in COLUMNS)}) VALUES "  # noqa: S608 - names are our constants, quoted
    tail = (
        f" ON CONFLICT ({q('msgid')}) DO UPDATE SET "
        + ", ".join(f"{q(name)} = {expr}" for name, expr in assignments.items())
        + f" WHERE {newer}"
    )
    return head, tail


def record_queued(
    msgid: str,
    *,
    queue: str,
    job: str,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    enqueued: datetime | None = None,
) -> None:
    """Write the ``queued`` row of a job just enqueued (a client-side row).

    ``enqueued`` (default now) is the time the caller told its own caller.
    """
    now = enqueued or timezone.now()
    record_results(
        [
            {
                "msgid": msgid,
                "queue": queue,
                "job": job,
                "args": list(args),
                "kwargs": dict(kwargs or {}),
                "status": JobStatus.QUEUED.value,
                "enqueued": now,
            }
        ],
        from_worker=False,
    )


def forget_queued(msgid: str) -> None:
    """Delete the ``queued`` row of a job that was never stored by the router.

    Only a client's own row: one a job manager wrote (the job did get there
    after all) is kept.
    """
    JobResult.objects.filter(msgid=msgid, jobmanager="", status=JobStatus.QUEUED).delete()


def record_cancel(msgid: str) -> None:
    """Mark a job cancelled by its client: only a queued (or unrecorded) one.

    A running job's row is the job manager's to finish (it stops the process
    and records ``cancelled``, or the job's real outcome if it was too late).
    """
    now = timezone.now()
    changed = JobResult.objects.filter(msgid=msgid, status=JobStatus.QUEUED).update(
        status=JobStatus.CANCELLED, finished=now, updated=now
    )
    if not changed:
        record_results(
            [{"msgid": msgid, "status": JobStatus.CANCELLED.value, "finished": now}],
            from_worker=False,
        )


def record_expired(msgid: str, message: str) -> None:
    """Mark a job ``expired`` that a router dropped unrun (a client-side row: routers have no
    database; the client read the router's Expired reply). A job manager's row is kept."""
    error = {"type": EXPIRED_ERROR, "message": message}
    record = {"msgid": msgid, "status": JobStatus.EXPIRED.value, "error": error}
    record_results([{**record, "finished": timezone.now()}], from_worker=False)
