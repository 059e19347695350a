"""The router's journal: every accepted job, on local disk, until it finished.

An embedded SQLite database (standard library, no server) in WAL mode, used
only by the router's thread. Writes go into one open transaction that the
router commits once per loop iteration (group commit): many jobs per sync.

Durability promise (``synchronous=FULL``, the default): when the router has
sent the ACK for a REQUEST, the job is in the WAL file and fsync'ed, so a
router crash, SIGKILL or power cut does not lose it. With ``normal`` the WAL
is written but not fsync'ed at each commit: a crash of the router process
loses nothing, a power cut may lose the last acknowledged jobs.

Rows move through states; a job is deleted when it finished::

    WAITING --dispatch--> LEASED --done--> (deleted)
       ^                    |  \\--died N times--> POISONED
       +----requeue---------+
    DELAYED --due--> WAITING          (delay-until header, retry back-off)

On start :meth:`recover` turns every LEASED row back into WAITING (handed
out, never reported finished): those jobs are handed out again.

The rest is split by what it does: :mod:`.schema` (tables, states,
rows), :mod:`.commit` (kept writes, group commit, write failures),
:mod:`.parcels`, :mod:`.finished` and
:mod:`.schedules` (the stores beside the jobs), :mod:`.check`
(file modes, lock, start-up checks, the mark) and :mod:`.salvage`
(``--journal-recover``).
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from typing import Any

from django_eventmq.protocol.headers import UNIQUE_KEY
from django_eventmq.router.journal.check import JournalDamaged, describe, resolve_path
from django_eventmq.router.journal.commit import JournalUnavailable
from django_eventmq.router.journal.finished import FinishedStore
from django_eventmq.router.journal.parcels import ParcelStore, parcel_digest
from django_eventmq.router.journal.schedules import ScheduleStore
from django_eventmq.router.journal.schema import (
    DELAYED,
    INSERT_JOB,
    LEASED,
    MEMORY,
    POISONED,
    WAITING,
    JobState,
    Parcel,
    Row,
    job_values,
    known_state,
    new_row,
    to_row,
)

#: Values per job row in INSERT_JOB (a chunked INSERT's rows are end to end).
_ROW_WIDTH = INSERT_JOB.count("?")

#: The columns of a :class:`Row`, in its order.
_ROW = "seq, msgid, queue, nprio, guarantee, headers, body, client, accepted, deaths, attempts"
# Statements, built once: the states from JobState (no bare numbers in SQL).
_WAITING_FIRST = (
    f"SELECT {_ROW} FROM jobs WHERE queue = ? AND state = {WAITING.sql}"  # noqa: S608
    " ORDER BY nprio, seq LIMIT ?"
)
_WAITING_AFTER = (
    f"SELECT {_ROW} FROM jobs WHERE queue = ? AND state = {WAITING.sql}"  # noqa: S608
    " AND (nprio, seq) > (?, ?) ORDER BY nprio, seq LIMIT ?"
)
_DUE = (
    f"SELECT {_ROW} FROM jobs WHERE state = {DELAYED.sql} AND due <= ?"  # noqa: S608
    " ORDER BY due LIMIT ?"
)
_NEXT_DUE = f"SELECT MIN(due) FROM jobs WHERE state = {DELAYED.sql}"  # noqa: S608
_POISONED = (
    f"SELECT {_ROW}, reason FROM jobs WHERE state = {POISONED.sql}"  # noqa: S608
    " ORDER BY seq LIMIT ?"
)
_FIND = f"SELECT state, {_ROW} FROM jobs WHERE msgid = ?"  # noqa: S608
#: What a unique job's header frame holds (:meth:`Journal.unique_rows` looks for it).
UNIQUE_MARK = UNIQUE_KEY.encode() + b":"
# Held (not poisoned, not a state this release does not know) with the header in
# their frame: one scan, the frames without it never leave SQLite.
_UNIQUE_ROWS = (
    "SELECT msgid, headers, accepted FROM jobs"  # noqa: S608
    f" WHERE state IN ({WAITING.sql}, {LEASED.sql}, {DELAYED.sql}) AND instr(headers, ?) > 0"
    " ORDER BY seq"
)
_RECOVER = f"UPDATE jobs SET state = {WAITING.sql} WHERE state = {LEASED.sql}"  # noqa: S608

__all__ = [
    "DELAYED",
    "LEASED",
    "MEMORY",
    "POISONED",
    "WAITING",
    "JobState",
    "Journal",
    "JournalDamaged",
    "JournalUnavailable",
    "Parcel",
    "Row",
    "describe",
    "job_values",
    "new_row",
    "parcel_digest",
    "resolve_path",
]


class Journal(ParcelStore, FinishedStore, ScheduleStore):
    """The job store. Every method runs in the router's thread; the per-job
    writes (:meth:`add`, :meth:`set_state`, :meth:`delete`) are kept in memory
    by :class:`.api.KeptWrites` and applied by :meth:`_flush`."""

    # -- writes (kept ones: :class:`.api.KeptWrites`) ----------------------------
    def _insert_now(self, values: list[Any]) -> bool:
        """Insert one new job at once; False if its msgid (or seq) is stored already."""
        return self._now(INSERT_JOB, values, changes=1).rowcount == 1

    def add_many(self, rows: list[list[Any]]) -> set[int]:
        """Insert new jobs (:func:`job_values`) at once; the seqs of those stored (a
        row whose msgid is held already is not)."""
        if not rows:
            return set()
        self._fresh()  # kept rows first, so the insert sees their msgids
        db = self.db
        before = db.total_changes
        self._now(INSERT_JOB, rows, many=True, changes=len(rows))
        seqs = [row[0] for row in rows]
        if db.total_changes - before == len(rows):
            return set(seqs)
        stored: set[int] = set()
        for at in range(0, len(seqs), 500):
            chunk = seqs[at : at + 500]
            marks = ",".join("?" * len(chunk))
            stored.update(
                seq
                for (seq,) in self._execute(
                    f"SELECT seq FROM jobs WHERE seq IN ({marks})",  # noqa: S608
                    chunk,
                )
            )
        return stored

    def holds_row(self, msgid: str) -> bool:
        """True if a job row (not a parcel's job) has ``msgid``: one index lookup. While
        the journal cannot be written, the rows a failed transaction had written
        count too (rolled back, but its replay writes them first)."""
        if msgid in self._new_msgids:
            return True
        if self.failure is not None and msgid in self._logged_msgids():
            return True
        return self._execute("SELECT 1 FROM jobs WHERE msgid = ?", (msgid,)).fetchone() is not None

    def _logged_msgids(self) -> set[str]:
        """The msgids of the new job rows in the log of writes to replay (rare: only
        asked while the journal cannot be written)."""
        found: set[str] = set()
        for sql, params, many in self._log:
            if sql.startswith(INSERT_JOB):  # INSERT_JOBS starts with it too
                # Each row's values end to end (one row, or a chunk of them a statement).
                for values in params if many else [params]:
                    found.update(values[1::_ROW_WIDTH])
        return found

    # -- reads -----------------------------------------------------------------
    def waiting(self, queue: str, after: tuple[int, int] | None, limit: int) -> list[Row]:
        """Up to ``limit`` WAITING jobs of ``queue`` in hand-out order, after the key ``after``."""
        self._fresh()
        if after is None:
            cursor = self._select(_WAITING_FIRST, (queue, limit))
        else:
            cursor = self._select(_WAITING_AFTER, (queue, after[0], after[1], limit))
        return [to_row(values) for values in cursor]

    def take_due(self, now: float, limit: int = 1000) -> list[Row]:
        """DELAYED jobs due at unix time ``now``, made WAITING."""
        self._fresh()
        rows = [to_row(values) for values in self._select(_DUE, (now, limit))]
        for row in rows:
            self.set_state(row.seq, WAITING)
        return rows

    def next_due(self) -> float | None:
        """When the next DELAYED job is due (unix time), if any."""
        self._fresh()
        value = self._select(_NEXT_DUE)[0][0]
        return None if value is None else float(value)

    def find(self, msgid: str) -> tuple[JobState, Row] | None:
        """``(state, row)`` of the job ``msgid``, if held (in a state this release knows)."""
        self._fresh()
        found = self._select(_FIND, (msgid,))
        state = known_state(found[0][0]) if found else None
        return None if state is None else (state, to_row(found[0][1:]))

    def unique_rows(self) -> list[tuple[str, bytes, float]]:
        """``(msgid, header frame, accepted)`` of the held jobs (waiting, delayed,
        handed out; not poisoned) whose headers hold ``unique-key:``, in acceptance
        order. (A parcel's jobs never have one: unique jobs are not stored as parcels.)"""
        self._fresh()
        return [
            (msgid, bytes(headers), float(accepted))
            for msgid, headers, accepted in self._select(_UNIQUE_ROWS, (UNIQUE_MARK,))
        ]

    def owner_of(self, msgid: str) -> str | None:
        """The CURVE key that sent job ``msgid``: None if it is not held, "" if it
        is held with none known (sent before owners were kept, or in a parcel).
        :class:`JournalUnavailable` if its row may be among the kept writes."""
        self._fresh()
        found = self._select("SELECT owner FROM jobs WHERE msgid = ?", (msgid,))
        if found:
            return found[0][0] or ""
        return "" if self.parcels_holding(msgid) else None

    def poisoned(self, limit: int = 100) -> list[tuple[Row, str]]:
        self._flush()
        cursor = self._execute(_POISONED, (limit,))
        return [(to_row(values[:-1]), values[-1]) for values in cursor]

    def counts(self) -> dict[JobState, Counter[str]]:
        """state -> queue -> number of jobs (rows in a state this release does not
        know are not counted)."""
        self._flush()
        result: dict[JobState, Counter[str]] = {state: Counter() for state in JobState}
        for number, queue, n in self._execute(
            "SELECT state, queue, COUNT(*) FROM jobs GROUP BY state, queue"
        ):
            state = known_state(number)
            if state is not None:
                result[state][queue] = n
        for queue, n in self._execute("SELECT queue, SUM(count) FROM parcels GROUP BY queue"):
            result[WAITING][queue] += n
        return result

    def max_seq(self) -> int:
        self._flush()
        return int(
            self._execute(
                "SELECT MAX((SELECT COALESCE(MAX(seq), 0) FROM jobs),"
                " (SELECT COALESCE(MAX(seq + count - 1), 0) FROM parcels))"
            ).fetchone()[0]
        )

    def recover(self) -> int:
        """On start: jobs handed out but never reported finished wait again. Returns how many."""
        self._flush()
        changed = self._write(_RECOVER, ())
        self.commit()
        return changed

    def size_bytes(self) -> int:
        """Bytes on disk (database + write-ahead log)."""
        if self.path == MEMORY:
            pages = self._execute("PRAGMA page_count").fetchone()[0]
            return int(pages) * int(self._execute("PRAGMA page_size").fetchone()[0])
        total = 0
        for suffix in ("", "-wal"):
            with contextlib.suppress(OSError):
                total += os.stat(self.path + suffix).st_size
        return total

    def is_empty(self) -> bool:
        """Nothing kept: no job, no SCHEDULE waiting, no finished msgid to refuse again."""
        self._flush()
        return all(
            self._execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is None  # noqa: S608
            for table in ("jobs", "parcels", "schedules", "finished")
        )
