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

Writes to the jobs and finished tables are kept in memory until the next
read or commit and then written with one ``executemany`` per kind (new rows,
changed columns, deleted rows): a statement per change cost more than the
change itself. Changes to one row are merged, and a job that is added and
finished within one commit never reaches the disk. Applying them grouped
(inserts, then updates, then deletes) is the same as applying them in order,
because a row's seq is never reused (changes kept for a seq before its row is
added are dropped: in order, they would have changed nothing). A kept
:meth:`add` cannot see a msgid that is only on disk, so the router inserts at
once (``on_disk=True``) while some jobs are held on disk only.

Parcels: a BATCH whose jobs share a queue and headers, arriving while its
queue already waits on disk, is stored as one row holding its JOBS frame as
received (``parcels``), not as a row per job: the jobs' seqs are reserved
(``seq .. seq + count - 1``) and nothing is indexed per job. A parcel is
opened, into a WAITING row per job, when its queue reaches it or a CANCEL
names one of its jobs; a job whose msgid is held already or finished
recently is dropped then (a duplicate found late rather than at once). The
SHA-256 of each stored parcel's JOBS frame is kept (``parcel_digests``): the
same BATCH sent again (a Spark task retried, an export sent again with the
same run_id) is known at once, and neither stored nor counted again.

Two small tables beside the jobs: the msgids of recently finished jobs
(``finished``, pruned by age and count inside a commit) so a REQUEST resent
after a restart is still recognised, and the SCHEDULE / UNSCHEDULE messages
acknowledged while no scheduler could take them (``schedules``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import sqlite3
import struct
import time
from collections import Counter
from collections.abc import Callable, Container
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..errors import ConfigurationError
from ..protocol.batch import unpack_jobs

log = logging.getLogger("django_eventmq.router")

WAITING = 0
LEASED = 1
POISONED = 2
DELAYED = 3
STATE_NAMES = {WAITING: "waiting", LEASED: "leased", POISONED: "poisoned", DELAYED: "delayed"}

#: In-memory journal (``JOURNAL=False``): the same store, nothing on disk.
MEMORY = ":memory:"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY,        -- acceptance order
    msgid TEXT NOT NULL UNIQUE,     -- the client's id: a resent REQUEST is the same job
    queue TEXT NOT NULL,
    nprio INTEGER NOT NULL,         -- minus the priority header: ascending = first out
    state INTEGER NOT NULL,
    due REAL NOT NULL DEFAULT 0,    -- unix time a DELAYED job becomes WAITING
    guarantee INTEGER NOT NULL,
    headers BLOB NOT NULL,
    body BLOB NOT NULL,
    client BLOB NOT NULL,           -- routing identity of the client, for its reply
    accepted REAL NOT NULL,         -- unix time accepted
    deaths INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    reason TEXT NOT NULL DEFAULT '',
    owner TEXT                      -- CURVE key that sent it (CANCEL_POLICY owner), or NULL
);
CREATE INDEX IF NOT EXISTS jobs_waiting ON jobs (queue, nprio, seq) WHERE state = 0;
CREATE INDEX IF NOT EXISTS jobs_delayed ON jobs (due) WHERE state = 3;
CREATE INDEX IF NOT EXISTS jobs_poisoned ON jobs (seq) WHERE state = 2;
-- BATCHes stored whole while their queue waits on disk, opened into jobs rows later
CREATE TABLE IF NOT EXISTS parcels (
    seq INTEGER PRIMARY KEY,        -- its first job's seq; the jobs take seq .. seq + count - 1
    count INTEGER NOT NULL,
    queue TEXT NOT NULL,
    nprio INTEGER NOT NULL,
    guarantee INTEGER NOT NULL,
    headers BLOB NOT NULL,          -- every job's header frame (a parcel's jobs share it)
    client BLOB NOT NULL,
    accepted REAL NOT NULL,
    jobs BLOB NOT NULL              -- the BATCH's JOBS frame as received
);
CREATE INDEX IF NOT EXISTS parcels_order ON parcels (queue, nprio, seq);
-- the SHA-256 of each parcel's JOBS frame: the same BATCH again is a duplicate at once
CREATE TABLE IF NOT EXISTS parcel_digests (
    seq INTEGER PRIMARY KEY,        -- its parcel
    digest BLOB NOT NULL UNIQUE
);
-- msgids of finished jobs, for a while: a resent REQUEST is not run twice after a restart
CREATE TABLE IF NOT EXISTS finished (
    seq INTEGER PRIMARY KEY,        -- finishing order (pruned oldest first)
    msgid TEXT NOT NULL,
    at REAL NOT NULL                -- unix time finished
);
-- SCHEDULE / UNSCHEDULE accepted while no scheduler could take them, in arrival order
CREATE TABLE IF NOT EXISTS schedules (
    seq INTEGER PRIMARY KEY,
    unschedule INTEGER NOT NULL,    -- 1: UNSCHEDULE (goes to every scheduler)
    job_key TEXT NOT NULL,          -- the job's schedule identity ('' if unreadable)
    timing_key TEXT NOT NULL,       -- its timing's identity ('' for "every timing")
    frames BLOB NOT NULL            -- the message as received, length-prefixed frames
);
"""

#: Seconds between two prunings of the finished msgids (done inside a commit).
PRUNE_INTERVAL = 1.0

_INSERT_JOB = (
    "INSERT OR IGNORE INTO jobs (seq, msgid, queue, nprio, state, due, guarantee, headers,"
    " body, client, accepted, deaths, attempts, reason, owner)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def new_row(
    seq: int,
    msgid: str,
    queue: str,
    priority: int,
    state: int,
    guarantee: bool,
    headers: bytes,
    body: bytes,
    client: bytes,
    accepted: float,
    due: float = 0.0,
    owner: str | None = None,
) -> list[Any]:
    """A new job's values for :meth:`Journal.add` (in ``_INSERT_JOB``'s order)."""
    return [
        seq,
        msgid,
        queue,
        -priority,
        state,
        due,
        guarantee,
        headers,
        body,
        client,
        accepted,
        0,
        0,
        "",
        owner,
    ]


#: Where a column's value sits in a new row's INSERT values.
_COLUMN_AT = {"state": 4, "due": 5, "deaths": 11, "attempts": 12, "reason": 13}


@dataclass(slots=True)
class Row:
    """A job as stored (what is needed to hand it out again)."""

    seq: int
    msgid: str
    queue: str
    nprio: int
    guarantee: bool
    headers: bytes
    body: bytes
    client: bytes
    accepted: float
    deaths: int
    attempts: int


def _row(values: tuple[Any, ...]) -> Row:
    return Row(
        values[0],
        values[1],
        values[2],
        values[3],
        bool(values[4]),
        values[5],
        values[6],
        values[7],
        values[8],
        values[9],
        values[10],
    )


def resolve_path(template: str, frontend_address: str) -> str:
    """The journal file for a router bound to ``frontend_address``."""
    if "{frontend}" not in template:
        return template
    tag = frontend_address.split("://", 1)[-1]
    tag = "".join(c if c.isalnum() or c in "._-" else "-" for c in tag).strip("-")
    return template.replace("{frontend}", tag or "router")


class Journal:
    """The job store. Every method runs in the router's thread."""

    def __init__(self, path: str, *, sync: str = "full") -> None:
        self.path = path
        self.syncs = 0
        #: Row changes not yet committed.
        self.pending = 0
        self._lock: IO[bytes] | None = None
        if path != MEMORY:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._lock = _exclusive_lock(path)
        try:
            self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            if path == MEMORY:
                self.db.execute("PRAGMA journal_mode=OFF")
                self.db.execute("PRAGMA synchronous=OFF")
            else:
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=" + ("FULL" if sync == "full" else "NORMAL"))
            self.db.execute("PRAGMA temp_store=MEMORY")
            self.db.executescript(_SCHEMA)
            _add_owner_column(self.db)
        except BaseException:
            self._unlock()
            raise
        self._in_tx = False
        self._closed = False
        self._execute = self.db.execute
        # Writes not yet applied (see the module doc): new rows by seq, their
        # msgids, column changes by seq, deleted seqs, finished msgids.
        self._new: dict[int, list[Any]] = {}
        self._new_msgids: set[str] = set()
        self._changed: dict[int, dict[str, Any]] = {}
        self._gone: set[int] = set()
        self._done: list[tuple[int, str, float]] = []
        #: Finished msgids kept: at most this many, for at least this many seconds
        #: (set by :meth:`keep_finished`; 0 keeps none).
        self.finished_keep = 0
        self.finished_window = 0.0
        self._finished_seq = int(
            self._execute("SELECT COALESCE(MAX(seq), 0) FROM finished").fetchone()[0]
        )
        self._prune_after = 0.0
        self._finished_added = False
        self._finished_clock: Callable[[], float] = time.time
        #: Parcels stored, per queue (no query to know a queue has none).
        self._parcels: Counter[str] = Counter(
            dict(self._execute("SELECT queue, COUNT(*) FROM parcels GROUP BY queue").fetchall())
        )

    # -- transactions ------------------------------------------------------
    def _begin(self, changes: int = 1) -> None:
        if not self._in_tx:
            self._execute("BEGIN")
            self._in_tx = True
        self.pending += changes

    def _write(self, sql: str, params: tuple[Any, ...]) -> int:
        self._begin()
        return self._execute(sql, params).rowcount

    def _flush(self) -> None:
        """Apply the writes kept in memory (inside the open transaction)."""
        db = self.db
        if self._new:
            rows = list(self._new.values())
            self._new.clear()
            self._new_msgids.clear()
            before = db.total_changes
            db.executemany(_INSERT_JOB, rows)
            ignored = len(rows) - (db.total_changes - before)
            if ignored:  # the router asks holds() first: this is a bug, say so
                log.error("journal: %d new job(s) not stored: msgid already held", ignored)
        if self._changed:
            groups: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
            for seq, columns in self._changed.items():
                names = tuple(sorted(columns))
                groups.setdefault(names, []).append((*(columns[n] for n in names), seq))
            self._changed.clear()
            for names, params in groups.items():
                assignments = ", ".join(f"{name} = ?" for name in names)
                db.executemany(f"UPDATE jobs SET {assignments} WHERE seq = ?", params)  # noqa: S608
        if self._gone:
            db.executemany("DELETE FROM jobs WHERE seq = ?", [(seq,) for seq in self._gone])
            self._gone.clear()
        if self._done:
            db.executemany("INSERT INTO finished (seq, msgid, at) VALUES (?, ?, ?)", self._done)
            self._done.clear()

    def commit(self) -> bool:
        """Make every change so far durable (one sync); False if there was none."""
        if not self._in_tx:
            return False
        self._flush()
        if self._finished_added:
            self._prune_finished(self._finished_clock())
        self._execute("COMMIT")
        self._in_tx = False
        self.pending = 0
        self.syncs += 1
        return True

    def close(self) -> None:
        """Commit and close (idempotent)."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(sqlite3.Error):
            self.commit()
            self.db.close()
        self._unlock()

    def _unlock(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    # -- writes ---------------------------------------------------------------
    def add(self, values: list[Any], *, on_disk: bool = False) -> bool:
        """Store a new job (its :func:`new_row`); False (nothing stored) when its
        msgid is held already.

        Kept for the next write unless ``on_disk`` says the msgid may be stored
        already: then the row is inserted at once, so that the insert finds out
        (cheaper than a lookup first). Without it a msgid that is only on disk
        is not seen.
        """
        seq, msgid = values[0], values[1]
        if msgid in self._new_msgids:
            return False
        self._begin()
        # Changes kept for this seq came before the row existed: written in
        # order they would have changed nothing.
        self._changed.pop(seq, None)
        self._gone.discard(seq)
        if on_disk:
            return self._execute(_INSERT_JOB, values).rowcount == 1
        self._new[seq] = values
        self._new_msgids.add(msgid)
        return True

    def add_many(self, rows: list[list[Any]]) -> set[int]:
        """Insert new jobs (:func:`new_row`) at once; the seqs of those stored (a
        row whose msgid is held already is not)."""
        if not rows:
            return set()
        self._flush()  # kept rows first, so the insert sees their msgids
        self._begin(len(rows))
        db = self.db
        before = db.total_changes
        db.executemany(_INSERT_JOB, rows)
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

    def _change(self, seq: int, **columns: Any) -> None:
        self._begin()
        new = self._new.get(seq)
        if new is not None:
            for name, value in columns.items():
                new[_COLUMN_AT[name]] = value
        else:
            self._changed.setdefault(seq, {}).update(columns)

    def set_state(self, seq: int, state: int) -> None:
        self._change(seq, state=state)

    def requeue(self, seq: int, deaths: int) -> None:
        self._change(seq, state=WAITING, deaths=deaths)

    def delay(self, seq: int, due: float, attempts: int) -> None:
        self._change(seq, state=DELAYED, due=due, attempts=attempts)

    def poison(self, seq: int, deaths: int, reason: str) -> None:
        self._change(seq, state=POISONED, deaths=deaths, reason=reason)

    def delete(self, seq: int) -> None:
        self._begin()
        new = self._new.pop(seq, None)
        if new is not None:
            self._new_msgids.discard(new[1])
            return
        self._changed.pop(seq, None)
        self._gone.add(seq)

    # -- parcels: a BATCH stored whole (see the module doc) ----------------------
    def add_parcel(
        self,
        seq: int,
        count: int,
        queue: str,
        priority: int,
        guarantee: bool,
        headers: bytes,
        client: bytes,
        accepted: float,
        jobs: bytes,
        digest: bytes | None = None,
    ) -> None:
        """Store ``count`` jobs of ``queue`` (the JOBS frame ``jobs``, whose jobs
        all carry ``headers``) as one row; they take seqs ``seq .. seq + count - 1``.
        ``digest``: :func:`parcel_digest` of ``jobs``, if already computed."""
        self._begin(count)
        self._execute(
            "INSERT INTO parcels (seq, count, queue, nprio, guarantee, headers, client,"
            " accepted, jobs) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (seq, count, queue, -priority, guarantee, headers, client, accepted, jobs),
        )
        self._execute(
            "INSERT OR IGNORE INTO parcel_digests (seq, digest) VALUES (?, ?)",
            (seq, parcel_digest(jobs) if digest is None else digest),
        )
        self._parcels[queue] += 1

    def holds_parcel(self, digest: bytes) -> bool:
        """True if a parcel not opened yet has the JOBS frame whose
        :func:`parcel_digest` is ``digest``: every job of that frame is held."""
        if not self._parcels.total():
            return False
        found = self._execute("SELECT 1 FROM parcel_digests WHERE digest = ?", (digest,))
        return found.fetchone() is not None

    def holds_row(self, msgid: str) -> bool:
        """True if a job row (not a parcel's job) has ``msgid``: one index lookup."""
        if msgid in self._new_msgids:
            return True
        return self._execute("SELECT 1 FROM jobs WHERE msgid = ?", (msgid,)).fetchone() is not None

    def parcel_count(self) -> int:
        """Parcels stored and not opened yet."""
        return self._parcels.total()

    def next_parcel(self, queue: str, upto: tuple[int, int] | None) -> int | None:
        """The first parcel of ``queue`` in hand-out order, if its first job's key
        ``(nprio, seq)`` is at most ``upto`` (None: whatever it is)."""
        if not self._parcels[queue]:
            return None
        found = self._execute(
            "SELECT nprio, seq FROM parcels WHERE queue = ? ORDER BY nprio, seq LIMIT 1", (queue,)
        ).fetchone()
        if found is None or (upto is not None and tuple(found) > upto):
            return None
        return int(found[1])

    def parcels_holding(self, msgid: str) -> list[int]:
        """Parcels whose JOBS frame contains ``msgid`` (a body may contain it too:
        open them, then :meth:`find`)."""
        if not self._parcels.total():
            return []
        cursor = self._execute(
            "SELECT seq FROM parcels WHERE instr(jobs, ?) > 0 ORDER BY seq", (msgid.encode(),)
        )
        return [int(seq) for (seq,) in cursor]

    def open_parcel(self, seq: int, skip: Container[str]) -> tuple[str, int]:
        """Turn parcel ``seq`` into a WAITING row per job. Returns its queue and how
        many jobs were dropped: their msgid was held already, or is in ``skip``."""
        self._flush()  # kept rows first, so the insert sees their msgids
        (count, queue, nprio, guarantee, headers, client, accepted, frame) = self._execute(
            "SELECT count, queue, nprio, guarantee, headers, client, accepted, jobs"
            " FROM parcels WHERE seq = ?",
            (seq,),
        ).fetchone()
        # We stored the frame after checking it: this cannot fail on a good journal.
        jobs = unpack_jobs(frame, max_jobs=count, max_bytes=len(frame))
        rows = [
            new_row(seq + i, msgid, queue, -nprio, WAITING, guarantee, headers, job[3], client,
                    accepted)
            for i, job in enumerate(jobs)
            if (msgid := job[0].decode()) not in skip
        ]  # fmt: skip
        self._begin(len(rows) + 1)
        db = self.db
        before = db.total_changes
        db.executemany(_INSERT_JOB, rows)
        stored = db.total_changes - before
        self._execute("DELETE FROM parcels WHERE seq = ?", (seq,))
        self._execute("DELETE FROM parcel_digests WHERE seq = ?", (seq,))
        self._parcels[queue] -= 1
        return queue, count - stored

    # -- finished msgids ------------------------------------------------------
    def keep_finished(
        self, keep: int, window: float, clock: Callable[[], float] = time.time
    ) -> None:
        """Keep up to ``keep`` finished msgids for ``window`` seconds (0: none) of ``clock``."""
        self.finished_keep = keep
        self.finished_window = window
        self._finished_clock = clock

    def add_finished(self, msgid: str, at: float) -> None:
        """Remember that ``msgid`` finished at unix time ``at`` (committed with the rest)."""
        if not self.finished_keep or not self.finished_window:
            return
        self._finished_seq += 1
        self._begin()
        self._done.append((self._finished_seq, msgid, at))
        self._finished_added = True

    def finished_since(self, since: float) -> list[tuple[str, float]]:
        """The newest ``finished_keep`` msgids finished at or after ``since``, oldest first."""
        self._flush()
        rows = self._execute(
            "SELECT msgid, at FROM finished WHERE at >= ? ORDER BY seq DESC LIMIT ?",
            (since, self.finished_keep),
        ).fetchall()
        rows.reverse()
        return [(str(msgid), float(at)) for msgid, at in rows]

    def prune_finished(self) -> None:
        """Drop finished msgids past the window or the count now (at start-up)."""
        self._flush()
        self._prune_finished(self._finished_clock(), force=True)

    def _prune_finished(self, now: float, *, force: bool = False) -> None:
        """Drop finished msgids past the window or the count (inside the open transaction).

        Both deletes walk the primary key from the oldest end, so they cost
        the rows they remove; they run at most once per ``PRUNE_INTERVAL``.
        """
        if now < self._prune_after and not force:
            return
        self._prune_after = now + PRUNE_INTERVAL
        self._finished_added = False
        self._execute(
            "DELETE FROM finished WHERE seq <= ?", (self._finished_seq - self.finished_keep,)
        )
        oldest = self._execute("SELECT seq, at FROM finished ORDER BY seq LIMIT 1").fetchone()
        if oldest is not None and oldest[1] < now - self.finished_window:
            # Finishing order is time order: find the first row young enough.
            young = self._execute(
                "SELECT MIN(seq) FROM finished WHERE seq >= ? AND at >= ?",
                (oldest[0], now - self.finished_window),
            ).fetchone()[0]
            limit = self._finished_seq + 1 if young is None else young
            self._execute("DELETE FROM finished WHERE seq < ?", (limit,))

    def finished_count(self) -> int:
        self._flush()
        return int(self._execute("SELECT COUNT(*) FROM finished").fetchone()[0])

    # -- SCHEDULE / UNSCHEDULE waiting for a scheduler ---------------------------
    def add_schedule(
        self, frames: list[bytes], *, unschedule: bool, job_key: str, timing_key: str
    ) -> None:
        """Keep a SCHEDULE or UNSCHEDULE (its frames as received) for a scheduler."""
        packed = b"".join(struct.pack(">I", len(frame)) + frame for frame in frames)
        self._write(
            "INSERT INTO schedules (unschedule, job_key, timing_key, frames) VALUES (?, ?, ?, ?)",
            (unschedule, job_key, timing_key, packed),
        )

    def drop_schedules(self, job_key: str, timing_key: str) -> int:
        """An UNSCHEDULE's effect on kept SCHEDULEs: drop the job's (all timings if
        ``timing_key`` is empty). Returns how many were dropped."""
        if timing_key:
            return self._write(
                "DELETE FROM schedules WHERE unschedule = 0 AND job_key = ? AND timing_key = ?",
                (job_key, timing_key),
            )
        return self._write("DELETE FROM schedules WHERE unschedule = 0 AND job_key = ?", (job_key,))

    def schedules(self, limit: int = 1000) -> list[tuple[int, bool, list[bytes]]]:
        """The oldest ``limit`` kept messages, oldest first: ``(seq, is UNSCHEDULE, frames)``."""
        return [
            (seq, bool(unschedule), _unpack(packed))
            for seq, unschedule, packed in self._execute(
                "SELECT seq, unschedule, frames FROM schedules ORDER BY seq LIMIT ?", (limit,)
            )
        ]

    def delete_schedule(self, seq: int) -> None:
        self._write("DELETE FROM schedules WHERE seq = ?", (seq,))

    def schedule_count(self) -> int:
        return int(self._execute("SELECT COUNT(*) FROM schedules").fetchone()[0])

    # -- reads -----------------------------------------------------------------
    def waiting(self, queue: str, after: tuple[int, int] | None, limit: int) -> list[Row]:
        """Up to ``limit`` WAITING jobs of ``queue`` in hand-out order, after the key ``after``."""
        self._flush()
        if after is None:
            cursor = self._execute(
                "SELECT seq, msgid, queue, nprio, guarantee, headers, body, client,"
                " accepted, deaths, attempts"
                " FROM jobs WHERE queue = ? AND state = 0"
                " ORDER BY nprio, seq LIMIT ?",
                (queue, limit),
            )
        else:
            cursor = self._execute(
                "SELECT seq, msgid, queue, nprio, guarantee, headers, body, client,"
                " accepted, deaths, attempts"
                " FROM jobs WHERE queue = ? AND state = 0"
                " AND (nprio, seq) > (?, ?) ORDER BY nprio, seq LIMIT ?",
                (queue, after[0], after[1], limit),
            )
        return [_row(values) for values in cursor]

    def take_due(self, now: float, limit: int = 1000) -> list[Row]:
        """DELAYED jobs due at unix time ``now``, made WAITING."""
        self._flush()
        rows = [
            _row(values)
            for values in self._execute(
                "SELECT seq, msgid, queue, nprio, guarantee, headers, body, client,"
                " accepted, deaths, attempts"
                " FROM jobs WHERE state = 3 AND due <= ? ORDER BY due LIMIT ?",
                (now, limit),
            )
        ]
        for row in rows:
            self.set_state(row.seq, WAITING)
        return rows

    def next_due(self) -> float | None:
        """When the next DELAYED job is due (unix time), if any."""
        self._flush()
        value = self._execute("SELECT MIN(due) FROM jobs WHERE state = 3").fetchone()[0]
        return None if value is None else float(value)

    def find(self, msgid: str) -> tuple[int, Row] | None:
        """``(state, row)`` of the job ``msgid``, if held."""
        self._flush()
        values = self._execute(
            "SELECT state, seq, msgid, queue, nprio, guarantee, headers, body, client,"
            " accepted, deaths, attempts FROM jobs WHERE msgid = ?",
            (msgid,),
        ).fetchone()
        return None if values is None else (values[0], _row(values[1:]))

    def owner_of(self, msgid: str) -> str | None:
        """The CURVE key that sent job ``msgid``: None if it is not held, "" if it
        is held with none known (sent before owners were kept, or in a parcel)."""
        self._flush()
        found = self._execute("SELECT owner FROM jobs WHERE msgid = ?", (msgid,)).fetchone()
        if found is not None:
            return found[0] or ""
        return "" if self.parcels_holding(msgid) else None

    def poisoned(self, limit: int = 100) -> list[tuple[Row, str]]:
        self._flush()
        cursor = self._execute(
            "SELECT seq, msgid, queue, nprio, guarantee, headers, body, client,"
            " accepted, deaths, attempts, reason FROM jobs"
            " WHERE state = 2 ORDER BY seq LIMIT ?",
            (limit,),
        )
        return [(_row(values[:-1]), values[-1]) for values in cursor]

    def counts(self) -> dict[int, Counter[str]]:
        """state -> queue -> number of jobs."""
        self._flush()
        result: dict[int, Counter[str]] = {state: Counter() for state in STATE_NAMES}
        for state, queue, n in self._execute(
            "SELECT state, queue, COUNT(*) FROM jobs GROUP BY state, queue"
        ):
            result.setdefault(state, Counter())[queue] = n
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
        changed = self._write("UPDATE jobs SET state = 0 WHERE state = 1", ())
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


def parcel_digest(jobs: bytes) -> bytes:
    """What tells a parcel's JOBS frame from any other (SHA-256: about 45 us for a
    500-job frame here, against the milliseconds its jobs cost the router)."""
    return hashlib.sha256(jobs).digest()


def _unpack(packed: bytes) -> list[bytes]:
    frames = []
    at = 0
    while at < len(packed):
        (size,) = struct.unpack_from(">I", packed, at)
        at += 4
        frames.append(packed[at : at + size])
        at += size
    return frames


def _add_owner_column(db: sqlite3.Connection) -> None:
    """Schema step: a journal made before jobs kept their sender's key gets the column."""
    if "owner" not in {row[1] for row in db.execute("PRAGMA table_info(jobs)")}:
        db.execute("ALTER TABLE jobs ADD COLUMN owner TEXT")


def _exclusive_lock(path: str) -> IO[bytes]:
    """Hold ``path.lock`` for this process: two routers must never share a journal."""
    handle = open(path + ".lock", "ab")  # noqa: SIM115 - held until close()
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise ConfigurationError(
            f"JOURNAL_PATH: {path} is in use by another router; give each router its own "
            "journal file"
        ) from None
    return handle
