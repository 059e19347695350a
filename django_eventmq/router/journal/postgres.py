"""The router's journal on PostgreSQL: the same store as the SQLite
:class:`.store.Journal`, shared by the routers of one group (one leads).

The tables live in the schema ``emq_<group>`` (:mod:`.pg_schema`, created and
migrated by the journal when it opens). Writes are kept in memory as the
SQLite journal keeps them and applied a few statements per kind in one
transaction per router loop iteration (group commit), fenced by the leader's
epoch; any failure kills the journal (:class:`LeadershipLost`) and the router
steps down. :mod:`.pg_commit` says how.

Durability (``sync``): ``full`` (the default) commits with
``synchronous_commit = on``: when COMMIT returned the transaction is in the
server's WAL on disk (and on a synchronous standby, if the server has one).
``normal`` commits with ``synchronous_commit = off``: the server acknowledges
before its WAL is flushed, so a crash of the PostgreSQL server (or its
machine) may lose the last acknowledged commits (up to about three times
``wal_writer_delay``, 600 ms by default); a crash of the router loses nothing
either way. The database is never left inconsistent.

The rest is split by what it does, like the SQLite side: :mod:`.pg_schema`
(tables, migrations, row conversions), :mod:`.pg_commit` (connection, kept
writes applied, commits, fencing, failures) and :mod:`.pg_stores` (parcels,
finished msgids, SCHEDULEs kept for a scheduler). This module has the jobs.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from django_eventmq.router.journal.pg_commit import LEASE_SHARE, Fence, public_dsn
from django_eventmq.router.journal.pg_schema import (
    DUE,
    FIND,
    INSERT_JOB,
    NEXT_DUE,
    POISONED_ROWS,
    RECOVER,
    SIZE,
    WAITING_AFTER,
    WAITING_FIRST,
    decoded_row,
    encoded_row,
)
from django_eventmq.router.journal.pg_stores import (
    PgFinishedStore,
    PgParcelStore,
    PgScheduleStore,
)
from django_eventmq.router.journal.schema import (
    DELAYED,
    LEASED,
    POISONED,
    WAITING,
    JobState,
    Row,
    known_state,
)
from django_eventmq.router.journal.store import UNIQUE_MARK

if TYPE_CHECKING:
    from django_eventmq.router.journal.api import JournalLike
    from django_eventmq.router.journal.store import Journal

# Held jobs with the header in their frame (as the SQLite journal's statement).
_UNIQUE_ROWS = (
    "SELECT msgid, headers, accepted FROM jobs"  # noqa: S608
    f" WHERE state IN ({WAITING.sql}, {LEASED.sql}, {DELAYED.sql})"
    " AND position(%s in headers) > 0 ORDER BY seq"
)

__all__ = ["LEASE_SHARE", "Fence", "PostgresJournal", "public_dsn"]


class PostgresJournal(PgParcelStore, PgFinishedStore, PgScheduleStore):
    """The job store on PostgreSQL (see the module doc). Every method runs in the
    router's thread, as the SQLite journal's do; the public surface is the one
    :class:`.api.JournalLike` names. The per-job writes are kept in memory by
    :class:`.api.KeptWrites`."""

    # -- jobs: writes (kept ones: :class:`.api.KeptWrites`) ------------------------------------
    #: The last :meth:`poisoned` answer: its limit, the list, the seqs in it.
    _poisoned_cache: tuple[int, list[tuple[Row, str]], set[int]] | None = None

    def _insert_now(self, values: list[Any]) -> bool:
        return self._write(INSERT_JOB, encoded_row(values)) == 1

    def add_many(self, rows: list[list[Any]]) -> set[int]:
        """Insert new jobs at once (one COPY); the seqs of those stored."""
        if not rows:
            return set()
        self._fresh()
        if any(row[4] == POISONED for row in rows):
            self._poisoned_cache = None
        with self._guard():
            stored = self._insert_jobs(rows)
            self.pending += len(rows)
            seqs = [row[0] for row in rows]
            if stored == len(rows):
                return set(seqs)
            found = self.conn.execute("SELECT seq FROM jobs WHERE seq = ANY(%s)", (seqs,))
            return {int(seq) for (seq,) in found}
        raise AssertionError("unreachable")  # pragma: no cover

    def holds_row(self, msgid: str) -> bool:
        """True if a job row (not a parcel's job) has ``msgid``: one index lookup."""
        if msgid in self._new_msgids:
            return True
        return bool(self._select("SELECT 1 FROM jobs WHERE msgid = %s", (msgid.encode(),)))

    # -- jobs: reads -----------------------------------------------------------------------------
    def waiting(self, queue: str, after: tuple[int, int] | None, limit: int) -> list[Row]:
        """Up to ``limit`` WAITING jobs of ``queue`` in hand-out order, after the key ``after``."""
        self._fresh()
        if after is None:
            rows = self._select(WAITING_FIRST, (queue.encode(), limit))
        else:
            rows = self._select(WAITING_AFTER, (queue.encode(), after[0], after[1], limit))
        return [decoded_row(values) for values in rows]

    def take_due(self, now: float, limit: int = 1000) -> list[Row]:
        """DELAYED jobs due at unix time ``now``, made WAITING."""
        self._fresh()
        rows = [decoded_row(values) for values in self._select(DUE, (now, limit))]
        for row in rows:
            self.set_state(row.seq, WAITING)
        return rows

    def next_due(self) -> float | None:
        """When the next DELAYED job is due (unix time), if any."""
        self._fresh()
        value = self._select(NEXT_DUE)[0][0]
        return None if value is None else float(value)

    def find(self, msgid: str) -> tuple[JobState, Row] | None:
        """``(state, row)`` of the job ``msgid``, if held (in a state this release knows)."""
        self._fresh()
        found = self._select(FIND, (msgid.encode(),))
        state = known_state(found[0][0]) if found else None
        return None if state is None else (state, decoded_row(found[0][1:]))

    def unique_rows(self) -> list[tuple[str, bytes, float]]:
        """``(msgid, header frame, accepted)`` of the held jobs (waiting, delayed,
        handed out; not poisoned) whose headers hold ``unique-key:``, in acceptance order."""
        self._fresh()
        return [
            (msgid.decode(), bytes(headers), float(accepted))
            for msgid, headers, accepted in self._select(_UNIQUE_ROWS, (UNIQUE_MARK,))
        ]

    def owner_of(self, msgid: str) -> str | None:
        """The CURVE key that sent job ``msgid``: None if not held, "" if held with none known."""
        self._fresh()
        found = self._select("SELECT owner FROM jobs WHERE msgid = %s", (msgid.encode(),))
        if found:
            return str(found[0][0] or "")
        return "" if self.parcels_holding(msgid) else None

    def poisoned(self, limit: int = 100) -> list[tuple[Row, str]]:
        """The first ``limit`` POISONED jobs by seq, and why. Read once, then answered
        from memory until a write may change them (:meth:`_change`, :meth:`delete`):
        STATUS asks for them every time."""
        cached = self._poisoned_cache
        if cached is None or cached[0] != limit:
            self._fresh()
            rows = self._select(POISONED_ROWS, (limit,))
            listed = [(decoded_row(values[:-1]), values[-1].decode()) for values in rows]
            cached = self._poisoned_cache = (limit, listed, {row.seq for row, _ in listed})
        else:
            self._alive()
        return list(cached[1])

    # The leader is the group's only writer: only its own writes change poisoned rows.
    def _change(self, seq: int, **columns: Any) -> None:
        cached = self._poisoned_cache
        if cached is not None and (columns.get("state") == POISONED or seq in cached[2]):
            self._poisoned_cache = None
        super()._change(seq, **columns)

    def add(self, values: list[Any], *, on_disk: bool = False) -> bool:
        if values[4] == POISONED:
            self._poisoned_cache = None
        return super().add(values, on_disk=on_disk)

    def delete(self, seq: int) -> None:
        cached = self._poisoned_cache
        if cached is not None and seq in cached[2]:
            self._poisoned_cache = None
        super().delete(seq)

    def counts(self) -> dict[JobState, Counter[str]]:
        """state -> queue -> number of jobs (rows in a state this release does not know
        are not counted); a parcel's jobs count as WAITING."""
        self._fresh()
        result: dict[JobState, Counter[str]] = {state: Counter() for state in JobState}
        for number, queue, n in self._select(
            "SELECT state, queue, COUNT(*) FROM jobs GROUP BY state, queue"
        ):
            state = known_state(number)
            if state is not None:
                result[state][queue.decode()] = int(n)
        for queue, n in self._select("SELECT queue, SUM(count) FROM parcels GROUP BY queue"):
            result[WAITING][queue.decode()] += int(n)
        return result

    def max_seq(self) -> int:
        self._fresh()
        return int(
            self._select(
                "SELECT GREATEST((SELECT COALESCE(MAX(seq), 0) FROM jobs),"
                " (SELECT COALESCE(MAX(seq + count - 1), 0) FROM parcels))"
            )[0][0]
        )

    def recover(self) -> int:
        """On start: jobs handed out but never reported finished wait again (committed,
        fenced). Returns how many."""
        self._fresh()
        changed = self._write(RECOVER, ())
        self.commit()
        return changed

    def size_bytes(self) -> int:
        """Bytes the group's tables take on the server (with their indexes and TOAST)."""
        return int(self._select(SIZE, (self.schema,))[0][0])

    def is_empty(self) -> bool:
        """Nothing kept: no job, no SCHEDULE waiting, no finished msgid to refuse again."""
        self._fresh()
        return not self._select(
            "SELECT 1 FROM jobs UNION ALL SELECT 1 FROM parcels UNION ALL SELECT 1 FROM schedules"
            " UNION ALL SELECT 1 FROM finished LIMIT 1"
        )


if TYPE_CHECKING:

    def _both_are_journals(a: Journal, b: PostgresJournal) -> list[JournalLike]:
        """mypy checks here that each backend has the surface the router uses."""
        return [a, b]
