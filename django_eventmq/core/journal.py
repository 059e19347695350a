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

Write failures (disk full, read-only or immutable file, I/O error, the write
lock held by another connection past ``busy_timeout``): the open transaction
is rolled back and nothing it held is lost. The writes it had applied are
logged (``_log``) and replayed, with the writes still kept in memory, by the
next :meth:`commit`, which returns True only once COMMIT returned: the
router releases an ACK or a hand-out only after that. Meanwhile
:attr:`Journal.failure` says why, kept writes go on piling up in memory, a
write that must happen at once raises :class:`JournalUnavailable`, and so do
the reads whose answer would miss the kept writes (the router then hands out
only what it holds in memory). A retry runs at most every ``RETRY_INTERVAL``.

Damage: every ``MARK_INTERVAL`` seconds (and at close) a commit also counts
itself in the ``meta`` table, and once it returned ``PATH.mark`` records
that count: the journal reached it. SQLite silently ignores a deleted, truncated or garbled
``-wal`` file; a journal whose count is below its mark lost committed writes,
and :func:`open_journal` refuses it, as it refuses one that fails
``PRAGMA quick_check``. :func:`salvage` copies what SQLite can still read
into a new journal and moves the damaged files aside.
"""

from __future__ import annotations

import contextlib
import errno
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

from ..errors import ConfigurationError, EventMQError
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
-- commits made (see the module doc: a journal below its mark lost committed writes)
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO meta (key, value) VALUES ('commits', 0);
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
#: Seconds between two tries to write while the journal cannot be written.
RETRY_INTERVAL = 1.0
#: Seconds between two "still cannot write" log lines.
REMIND_INTERVAL = 60.0
#: Seconds between two writes of the mark file (PATH.mark).
MARK_INTERVAL = 2.0
#: Tables :func:`salvage` copies, with the column that orders their rows.
_TABLES = ("jobs", "parcels", "finished", "schedules")


class JournalUnavailable(EventMQError):
    """The journal cannot be written (or read consistently) now; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class JournalDamaged(ConfigurationError):
    """The journal failed its checks at start-up; the message says what to do."""


def describe(exc: BaseException) -> str:
    """A short cause for a SQLite or OS error, for the one log line an operator reads."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name.startswith("SQLITE_FULL") or getattr(exc, "errno", None) == 28:
        return "disk full"
    if name.startswith("SQLITE_BUSY") or name.startswith("SQLITE_LOCKED"):
        return "locked by another connection (an sqlite3 shell, a backup, a VACUUM?)"
    if (
        name.startswith("SQLITE_READONLY")
        or isinstance(exc, PermissionError)
        or getattr(exc, "errno", None) == errno.EROFS
    ):
        return "not writable (read-only or immutable file or directory)"
    if name.startswith("SQLITE_IOERR"):
        return f"I/O error ({exc})"
    return str(exc) or type(exc).__name__


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


_INSERT_FINISHED = "INSERT INTO finished (seq, msgid, at) VALUES (?, ?, ?)"

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

    def __init__(
        self, path: str, *, sync: str = "full", busy_timeout: float = 5.0, check: bool = True
    ) -> None:
        """Open (or create, mode 0600) the journal at ``path``.

        ``busy_timeout``: seconds a write waits for another connection's lock
        before it fails (then the journal retries later). ``check``: refuse a
        damaged journal (:class:`JournalDamaged`) and one that cannot be
        written (:class:`ConfigurationError`), each with one clear message.
        """
        self.path = path
        self.syncs = 0
        #: Row changes not yet committed.
        self.pending = 0
        #: Why the journal cannot be written now (None: it can).
        self.failure: str | None = None
        #: Writes applied to the open transaction, replayed after a failed one
        #: (``(sql, params, many)``; see the module doc).
        self._log: list[tuple[str, Any, bool]] = []
        self._failed_since = 0.0
        self._retry_at = 0.0
        self._remind_at = 0.0
        self._mark_at = 0.0
        self._lock: IO[bytes] | None = None
        try:
            if path != MEMORY:
                if check:
                    check_file(path)
                _create_private(path)
                self._lock = _exclusive_lock(path)
            self.db = sqlite3.connect(
                path, isolation_level=None, check_same_thread=False, timeout=busy_timeout
            )
            if path == MEMORY:
                self.db.execute("PRAGMA journal_mode=OFF")
                self.db.execute("PRAGMA synchronous=OFF")
            else:
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=" + ("FULL" if sync == "full" else "NORMAL"))
            self.db.execute("PRAGMA temp_store=MEMORY")
            self.db.executescript(_SCHEMA)
            _add_owner_column(self.db)
            self.commits = int(
                self.db.execute("SELECT value FROM meta WHERE key = 'commits'").fetchone()[0]
            )
            if check and path != MEMORY:
                # A write probe: one clear line now rather than failing later.
                self.db.execute("BEGIN")
                self.db.execute("UPDATE meta SET value = value + 1 WHERE key = 'commits'")
                self.db.execute("COMMIT")
                self.commits += 1
                self._write_mark()
        except sqlite3.DatabaseError as exc:
            self._close_db()
            if _is_damage(exc):
                raise JournalDamaged(damaged_message(path, str(exc))) from None
            raise ConfigurationError(_unwritable_message(path, exc)) from None
        except OSError as exc:
            self._close_db()
            raise ConfigurationError(_unwritable_message(path, exc)) from None
        except BaseException:
            self._close_db()
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
        if not self._in_tx and self.failure is None:
            self._execute("BEGIN")
            self._in_tx = True
        self.pending += changes

    def _now(
        self, sql: str, params: Any, *, many: bool = False, changes: int = 0
    ) -> sqlite3.Cursor:
        """Apply one write at once (logged for a replay should the transaction fail);
        :class:`JournalUnavailable` if it cannot be written."""
        return self._now_all([(sql, params, many)], changes)[-1]

    def _now_all(self, writes: list[tuple[str, Any, bool]], changes: int) -> list[sqlite3.Cursor]:
        """:meth:`_now` for writes that stand or fall together."""
        if self.failure is not None:
            raise JournalUnavailable(self.failure)
        self._begin(0)
        cursors = []
        try:
            for sql, params, many in writes:
                cursors.append(
                    self.db.executemany(sql, params) if many else self._execute(sql, params)
                )
        except sqlite3.Error as exc:
            self._fail(exc)
            raise JournalUnavailable(self.failure or describe(exc)) from None
        self._log.extend(writes)
        self.pending += changes
        return cursors

    def _fresh(self) -> None:
        """Before a read whose answer must include the kept writes:
        :class:`JournalUnavailable` if they cannot be written."""
        if not self._flush():
            raise JournalUnavailable(self.failure or "cannot be written")

    def _select(self, sql: str, params: Any = ()) -> list[Any]:
        """A read the router's decisions depend on (after :meth:`_fresh`)."""
        try:
            return self._execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise JournalUnavailable(describe(exc)) from None

    def _write(self, sql: str, params: tuple[Any, ...]) -> int:
        return self._now(sql, params, changes=1).rowcount

    def _apply(self, sql: str, params: Any) -> bool:
        """executemany for :meth:`_flush`: False (the transaction failed) on an error."""
        try:
            self.db.executemany(sql, params)
        except sqlite3.Error as exc:
            self._fail(exc)
            return False
        self._log.append((sql, params, True))
        return True

    def _flush(self) -> bool:
        """Apply the writes kept in memory (inside the open transaction); False, and
        all of them still kept, if the journal cannot be written."""
        if self.failure is not None:
            return False
        db = self.db
        if self._new:
            rows = list(self._new.values())
            before = db.total_changes
            if not self._apply(_INSERT_JOB, rows):
                return False
            self._new.clear()
            self._new_msgids.clear()
            ignored = len(rows) - (db.total_changes - before)
            if ignored:  # the router asks holds() first: this is a bug, say so
                log.error("journal: %d new job(s) not stored: msgid already held", ignored)
        if self._changed:
            groups: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
            for seq, columns in self._changed.items():
                names = tuple(sorted(columns))
                groups.setdefault(names, []).append((*(columns[n] for n in names), seq))
            for names, params in groups.items():
                assignments = ", ".join(f"{name} = ?" for name in names)
                # A group applied twice (after a failure) sets the same values again.
                if not self._apply(f"UPDATE jobs SET {assignments} WHERE seq = ?", params):  # noqa: S608
                    return False
            self._changed.clear()
        if self._gone:
            if not self._apply("DELETE FROM jobs WHERE seq = ?", [(seq,) for seq in self._gone]):
                return False
            self._gone.clear()
        if self._done:
            # A new list after: the log keeps this one.
            if not self._apply(_INSERT_FINISHED, self._done):
                return False
            self._done = []
        return True

    def _fail(self, exc: BaseException) -> None:
        """A write or COMMIT failed: roll the transaction back (its writes stay in
        ``_log`` and the kept ones in memory) and say so once, then at a slow rate."""
        if self.db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self._execute("ROLLBACK")
        self._in_tx = False
        now = time.monotonic()
        self._retry_at = now + RETRY_INTERVAL
        cause = describe(exc)
        if cause.startswith("I/O error"):
            cause = self._file_problem() or cause
        if not self._failed_since:  # the first failure since the last commit
            self._failed_since = now
            self._remind_at = now + REMIND_INTERVAL
            log.error(
                "journal %s cannot be written: %s. New jobs are not acknowledged (REJECT or "
                "clients held back, per HWM_POLICY) until it can; stored jobs are still "
                "handed out. Retrying every %gs.",
                self.path,
                cause,
                RETRY_INTERVAL,
            )
        elif now >= self._remind_at:
            self._remind_at = now + REMIND_INTERVAL
            log.error(
                "journal %s still cannot be written (%s) after %.0fs; %d change(s) wait in memory",
                self.path,
                cause,
                now - self._failed_since,
                self.pending,
            )
        self.failure = cause

    def commit(self) -> bool:
        """Make every change so far durable (one sync); False if there was none, or
        if the journal cannot be written now: then nothing is lost, :attr:`pending`
        stays, and a later call tries again (at most every ``RETRY_INTERVAL``)."""
        if not self.pending:
            return False
        retrying = self.failure is not None
        if retrying and (time.monotonic() < self._retry_at or not self._replay()):
            return False
        if not self._flush():
            return False
        # The commit count is stored only with a commit that a new mark follows.
        marking = self._lock is not None and time.monotonic() >= self._mark_at
        try:
            if self._finished_added:
                self._prune_finished(self._finished_clock())
            if marking:
                self._execute(
                    "UPDATE meta SET value = ? WHERE key = 'commits'", (self.commits + 1,)
                )
            self._execute("COMMIT")
        except sqlite3.Error as exc:
            self._fail(exc)
            return False
        self._in_tx = False
        self._log.clear()
        if retrying:
            log.warning(
                "journal %s can be written again after %.0fs: %d kept change(s) stored",
                self.path,
                time.monotonic() - self._failed_since,
                self.pending,
            )
            self._failed_since = 0.0
        self.pending = 0
        self.syncs += 1
        if marking:
            self.commits += 1
            self._write_mark()
        return True

    def _replay(self) -> bool:
        """After a failure: a new transaction with the writes the failed one had applied."""
        self.failure, cause = None, self.failure
        try:
            self._execute("BEGIN")
            self._in_tx = True
            for sql, params, many in self._log:
                if many:
                    self.db.executemany(sql, params)
                else:
                    self._execute(sql, params)
        except sqlite3.Error as exc:
            self.failure = cause
            self._fail(exc)
            return False
        return True

    def close(self) -> None:
        """Commit and close (idempotent). Changes that cannot be written are lost
        here, as in a crash: nothing that depended on them was released."""
        if self._closed:
            return
        self._closed = True
        self._retry_at = self._mark_at = 0.0
        self.commit()
        self._close_db()

    @property
    def closed(self) -> bool:
        return self._closed

    def _close_db(self) -> None:
        db = getattr(self, "db", None)
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.close()
        self._unlock()

    def _unlock(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def _file_problem(self) -> str | None:
        """What stops the journal's files being written, if the OS says (SQLite's
        I/O error does not: an immutable file, a read-only remount)."""
        if self._lock is None:
            return None
        for name in (self.path, self.path + "-wal", self.path + "-shm"):
            try:
                os.close(os.open(name, os.O_WRONLY | os.O_APPEND))
            except FileNotFoundError:
                continue
            except OSError as exc:
                return f"{describe(exc)}: {name}"
        return None

    def _write_mark(self) -> None:
        self._mark_at = time.monotonic() + MARK_INTERVAL
        try:
            write_mark(self.path, self.commits)
        except OSError as exc:  # a full disk: the journal itself says so
            log.debug("journal %s: mark not written: %s", self.path, exc)

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
        # Changes kept for this seq came before the row existed: written in
        # order they would have changed nothing.
        self._changed.pop(seq, None)
        self._gone.discard(seq)
        if on_disk:
            return self._now(_INSERT_JOB, values, changes=1).rowcount == 1
        self._begin()
        self._new[seq] = values
        self._new_msgids.add(msgid)
        return True

    def add_many(self, rows: list[list[Any]]) -> set[int]:
        """Insert new jobs (:func:`new_row`) at once; the seqs of those stored (a
        row whose msgid is held already is not)."""
        if not rows:
            return set()
        self._fresh()  # kept rows first, so the insert sees their msgids
        db = self.db
        before = db.total_changes
        self._now(_INSERT_JOB, rows, many=True, changes=len(rows))
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
        self._now_all(
            [
                (
                    "INSERT INTO parcels (seq, count, queue, nprio, guarantee, headers, client,"
                    " accepted, jobs) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (seq, count, queue, -priority, guarantee, headers, client, accepted, jobs),
                    False,
                ),
                (
                    "INSERT OR IGNORE INTO parcel_digests (seq, digest) VALUES (?, ?)",
                    (seq, parcel_digest(jobs) if digest is None else digest),
                    False,
                ),
            ],
            count,
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
        self._fresh()
        rows = self._select(
            "SELECT nprio, seq FROM parcels WHERE queue = ? ORDER BY nprio, seq LIMIT 1", (queue,)
        )
        found = rows[0] if rows else None
        if found is None or (upto is not None and tuple(found) > upto):
            return None
        return int(found[1])

    def parcels_holding(self, msgid: str) -> list[int]:
        """Parcels whose JOBS frame contains ``msgid`` (a body may contain it too:
        open them, then :meth:`find`)."""
        if not self._parcels.total():
            return []
        self._fresh()
        cursor = self._select(
            "SELECT seq FROM parcels WHERE instr(jobs, ?) > 0 ORDER BY seq", (msgid.encode(),)
        )
        return [int(seq) for (seq,) in cursor]

    def open_parcel(self, seq: int, skip: Container[str]) -> tuple[str, int]:
        """Turn parcel ``seq`` into a WAITING row per job. Returns its queue and how
        many jobs were dropped: their msgid was held already, or is in ``skip``."""
        self._fresh()  # kept rows first, so the insert sees their msgids
        (count, queue, nprio, guarantee, headers, client, accepted, frame) = self._select(
            "SELECT count, queue, nprio, guarantee, headers, client, accepted, jobs"
            " FROM parcels WHERE seq = ?",
            (seq,),
        )[0]
        # We stored the frame after checking it: this cannot fail on a good journal.
        jobs = unpack_jobs(frame, max_jobs=count, max_bytes=len(frame))
        rows = [
            new_row(seq + i, msgid, queue, -nprio, WAITING, guarantee, headers, job[3], client,
                    accepted)
            for i, job in enumerate(jobs)
            if (msgid := job[0].decode()) not in skip
        ]  # fmt: skip
        inserted = self._now_all(
            [
                (_INSERT_JOB, rows, True),
                ("DELETE FROM parcels WHERE seq = ?", (seq,), False),
                ("DELETE FROM parcel_digests WHERE seq = ?", (seq,), False),
            ],
            len(rows) + 1,
        )
        stored = inserted[0].rowcount
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
        self._fresh()
        if after is None:
            cursor = self._select(
                "SELECT seq, msgid, queue, nprio, guarantee, headers, body, client,"
                " accepted, deaths, attempts"
                " FROM jobs WHERE queue = ? AND state = 0"
                " ORDER BY nprio, seq LIMIT ?",
                (queue, limit),
            )
        else:
            cursor = self._select(
                "SELECT seq, msgid, queue, nprio, guarantee, headers, body, client,"
                " accepted, deaths, attempts"
                " FROM jobs WHERE queue = ? AND state = 0"
                " AND (nprio, seq) > (?, ?) ORDER BY nprio, seq LIMIT ?",
                (queue, after[0], after[1], limit),
            )
        return [_row(values) for values in cursor]

    def take_due(self, now: float, limit: int = 1000) -> list[Row]:
        """DELAYED jobs due at unix time ``now``, made WAITING."""
        self._fresh()
        rows = [
            _row(values)
            for values in self._select(
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
        self._fresh()
        value = self._select("SELECT MIN(due) FROM jobs WHERE state = 3")[0][0]
        return None if value is None else float(value)

    def find(self, msgid: str) -> tuple[int, Row] | None:
        """``(state, row)`` of the job ``msgid``, if held."""
        self._fresh()
        found = self._select(
            "SELECT state, seq, msgid, queue, nprio, guarantee, headers, body, client,"
            " accepted, deaths, attempts FROM jobs WHERE msgid = ?",
            (msgid,),
        )
        values = found[0] if found else None
        return None if values is None else (values[0], _row(values[1:]))

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
    fd = os.open(path + ".lock", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    handle = os.fdopen(fd, "ab")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise ConfigurationError(
            f"JOURNAL_PATH: {path} is in use by another router; give each router its own "
            "journal file"
        ) from None
    return handle


# -- files, damage and salvage (see the module doc) ----------------------------------
def _create_private(path: str) -> None:
    """Create the journal's directory, and the file itself mode 0600: it holds job
    bodies, and SQLite gives its -wal and -shm files the database file's mode."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def check_file(path: str) -> None:
    """Refuse a damaged journal (:class:`JournalDamaged`): SQLite's own check of the
    file, and its commit count against its mark. Read-only, so that a refused
    journal stays exactly as it was (closing a writer would checkpoint what is
    left of a damaged -wal file into it and delete that file)."""
    mark = read_mark(path)
    if not os.path.exists(path):
        if mark:
            raise JournalDamaged(
                damaged_message(path, f"the file is missing but {path}.mark says {mark} were made")
            )
        return
    try:
        db = sqlite3.connect(Path(path).absolute().as_uri() + "?mode=ro", uri=True)
    except sqlite3.Error:
        return  # the writer's open says what is wrong
    try:
        problems = [str(row[0]) for row in db.execute("PRAGMA quick_check(5)")]
        if problems != ["ok"]:
            raise JournalDamaged(damaged_message(path, "; ".join(problems)))
        try:
            commits = int(db.execute("SELECT value FROM meta WHERE key = 'commits'").fetchone()[0])
        except (sqlite3.OperationalError, TypeError):
            commits = 0  # no meta table (yet): none counted
        if mark is not None and commits < mark:
            raise JournalDamaged(
                damaged_message(
                    path,
                    f"it holds {commits} commit(s) but {path}.mark says {mark} were made: its "
                    "-wal file was deleted, truncated or damaged, or the journal file was "
                    "replaced",
                )
            )
    except sqlite3.DatabaseError as exc:
        if _is_damage(exc):
            raise JournalDamaged(damaged_message(path, str(exc))) from None
    finally:
        db.close()


def _is_damage(exc: sqlite3.DatabaseError) -> bool:
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or not isinstance(
        exc, sqlite3.OperationalError
    )


def damaged_message(path: str, detail: str) -> str:
    """What an operator reads when the router refuses a damaged journal."""
    return (
        f"JOURNAL_PATH: journal {path} is damaged ({detail}); the router did not start and "
        "changed nothing. Run the router once with --journal-recover: it copies what SQLite "
        f"can still read into a new journal and moves the damaged files to "
        f"{path}.damaged-TIME (its -wal file and mark too). Or move {path}, {path}-wal and "
        f"{path}.mark away yourself to start with an empty journal."
    )


def _unwritable_message(path: str, exc: BaseException) -> str:
    return (
        f"JOURNAL_PATH: cannot write journal {path}: {describe(exc)}. Free space or fix its "
        "permissions (chmod, chattr -i, a read-only mount), or set JOURNAL_PATH elsewhere, "
        "and start again."
    )


def read_mark(path: str) -> int | None:
    """The commit count ``PATH.mark`` says the journal reached (None: no mark)."""
    try:
        text = Path(path + ".mark").read_text()
    except FileNotFoundError:
        return None
    try:
        return int(text.split()[0])
    except (ValueError, IndexError):
        return None  # an unreadable mark proves nothing


def write_mark(path: str, commits: int) -> None:
    """Record (mode 0600, replaced whole) that the journal reached ``commits`` commits."""
    partial = path + ".mark.new"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(f"{commits}\n")
    os.replace(partial, path + ".mark")


def salvage(path: str) -> tuple[str, dict[str, int], int]:
    """Move a damaged journal aside and copy into a new one at ``path`` every row
    SQLite can still read. Returns where the damaged files went, rows copied per
    table, and rows (or runs of rows) that could not be read."""
    lock = _exclusive_lock(path)  # no router may be using it
    try:
        aside = f"{path}.damaged-{time.strftime('%Y%m%d-%H%M%S')}"
        for suffix in ("", "-wal", "-shm", ".mark"):
            with contextlib.suppress(FileNotFoundError):
                os.replace(path + suffix, aside + suffix)
    finally:
        lock.close()
    journal = Journal(path, check=False)
    copied: dict[str, int] = {}
    unreadable = 0
    try:
        try:
            # Read-only: the damaged files stay as they were, for a closer look.
            old = sqlite3.connect(f"file:{aside}?mode=ro", uri=True, isolation_level=None)
            tables = {row[0] for row in old.execute("SELECT name FROM sqlite_master")}
        except sqlite3.DatabaseError:
            return aside, copied, 1  # nothing readable (not a database at all)
        commits = 0
        with contextlib.suppress(sqlite3.DatabaseError):
            commits = int(old.execute("SELECT value FROM meta WHERE key = 'commits'").fetchone()[0])
        for (table,) in journal.db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name != 'meta'"
        ).fetchall():
            if table not in tables:
                continue
            columns = [row[1] for row in journal.db.execute(f"PRAGMA table_info({table})")]
            with contextlib.suppress(sqlite3.DatabaseError):  # an older journal has fewer
                had = {row[1] for row in old.execute(f"PRAGMA table_info({table})")}
                columns = [name for name in columns if name in had]
            copied[table], bad = _copy_table(old, journal.db, table, columns)
            unreadable += bad
        old.close()
        journal.commits = max(commits, read_mark(aside) or 0)
        journal.db.execute("UPDATE meta SET value = ? WHERE key = 'commits'", (journal.commits,))
    finally:
        journal.close()
    return aside, copied, unreadable


def _copy_table(
    old: sqlite3.Connection, new: sqlite3.Connection, table: str, columns: list[str]
) -> tuple[int, int]:
    """Copy ``table`` in rowid order, 500 rows at a time; a run that cannot be read
    is skipped (a few rowids at a time, then more). Returns (copied, runs skipped)."""
    names = ", ".join(columns)
    insert = f"INSERT OR IGNORE INTO {table} ({names}) VALUES ({', '.join('?' * len(columns))})"  # noqa: S608
    select = f"SELECT rowid, {names} FROM {table} WHERE rowid > ? ORDER BY rowid LIMIT 500"  # noqa: S608
    last, copied, bad, step = -(2**63), 0, 0, 1
    while bad < 10_000:
        try:
            rows = old.execute(select, (last,)).fetchall()
        except sqlite3.DatabaseError:
            bad += 1
            last += step
            step = min(step * 2, 1 << 20)
            continue
        if not rows:
            break
        step = 1
        new.execute("BEGIN")
        new.executemany(insert, [row[1:] for row in rows])
        new.execute("COMMIT")
        copied += len(rows)
        last = rows[-1][0]
    return copied, bad
