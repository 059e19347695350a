"""The journal's writes: kept in memory, flushed into one transaction, committed
once per router loop iteration, and kept safe while the file cannot be written.

Writes to the jobs and finished tables are kept in memory until the next
read or commit and then written with one ``executemany`` per kind (new rows,
changed columns, deleted rows): a statement per change cost more than the
change itself. New rows go :data:`.schema.INSERT_CHUNK` a statement and
deleted rows a run of consecutive seqs a statement (:func:`inserts`,
:func:`seq_spans`): one statement step then does the work of many. Changes
to one row are merged, and a job that is added and finished within one
commit never reaches the disk. Applying them grouped
(deletes with the finished msgids, then inserts, then updates) is the same as
applying them in order, because a row's seq is never reused (changes kept for
a seq before its row is added are dropped: in order, they would have changed
nothing). A msgid can be: with the finished window off, a new job may carry
the msgid of one whose delete is still kept, so deletes go first. A kept
:meth:`.api.KeptWrites.add` cannot see a msgid that is only on disk, so the
router inserts at once (``on_disk=True``) while some jobs are held on disk only
and its filter of stored msgids (:class:`..dedup.StoredMsgids`) does not rule
the msgid out.

Write failures (disk full, read-only or immutable file, I/O error, the write
lock held by another connection past ``busy_timeout``): the open transaction
is rolled back and nothing it held is lost. The writes it had applied are
logged (``_log``) and replayed (and committed first, alone) by the next
:meth:`commit`, then the writes still kept in memory; it returns True only
once their COMMIT returned: the
router releases an ACK only after that (and, while a failure is known, the
hand-out of a job this journal does not hold yet). Meanwhile
:attr:`Journal.failure` says why, kept writes go on piling up in memory, a
write that must happen at once raises :class:`JournalUnavailable`, and so do
the reads whose answer would miss the kept writes (the router then hands out
only what it holds in memory). A retry runs at most every ``RETRY_INTERVAL``;
on a full disk it first checkpoints the WAL and truncates it (:meth:`_empty_wal`).
The WAL is checkpointed every ``WAL_CHECKPOINT_PAGES`` so that it never takes
the room the journal file needs to take its pages back.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterable
from itertools import chain
from typing import IO, Any

from django_eventmq.errors import ConfigurationError, EventMQError
from django_eventmq.router.journal.api import KeptWrites
from django_eventmq.router.journal.check import (
    DISK_FULL,
    JournalDamaged,
    check_file,
    create_private,
    damaged_message,
    describe,
    exclusive_lock,
    is_damage,
    unwritable_message,
    write_mark,
)
from django_eventmq.router.journal.schema import (
    INSERT_CHUNK,
    INSERT_FINISHED,
    INSERT_JOB,
    INSERT_JOBS,
    MEMORY,
    SCHEMA,
    add_owner_column,
)

log = logging.getLogger("django_eventmq.router")

#: Seconds between two prunings of the finished msgids (done inside a commit).
PRUNE_INTERVAL = 1.0
#: Seconds between two tries to write while the journal cannot be written.
RETRY_INTERVAL = 1.0
#: Seconds between two "still cannot write" log lines.
REMIND_INTERVAL = 60.0
#: Seconds between two writes of the mark file (PATH.mark).
MARK_INTERVAL = 2.0
#: WAL pages after which a commit copies them into the journal file (SQLite's
#: default, 1,000 pages = 4 MiB, is more than a small disk has: the WAL was never
#: checkpointed, took every byte freed and could then never be copied back).
WAL_CHECKPOINT_PAGES = 256
#: Bytes the WAL file is cut back to once checkpointed (a burst's big WAL is given
#: back to the file system instead of being kept at its largest).
WAL_SIZE_LIMIT = 1 << 20


#: A write that changes nothing, to find out whether the journal can be written.
_PROBE = ("UPDATE meta SET value = value WHERE key = 'commits'", (), False)


class JournalUnavailable(EventMQError):
    """The journal cannot be written (or read consistently) now; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class JournalBase(KeptWrites):
    """The open journal: transactions, commits and their failures, applying the
    writes :class:`.api.KeptWrites` keeps (:meth:`_flush`).

    :class:`.store.Journal` adds the stores on top. Every method runs in the
    router's thread."""

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
                create_private(path)
                self._lock = exclusive_lock(path)
            self.db = sqlite3.connect(
                path, isolation_level=None, check_same_thread=False, timeout=busy_timeout
            )
            if path == MEMORY:
                self.db.execute("PRAGMA journal_mode=OFF")
                self.db.execute("PRAGMA synchronous=OFF")
            else:
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=" + ("FULL" if sync == "full" else "NORMAL"))
                self.db.execute(f"PRAGMA wal_autocheckpoint={WAL_CHECKPOINT_PAGES}")
                self.db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
            self.db.execute("PRAGMA temp_store=MEMORY")
            self.db.executescript(SCHEMA)
            add_owner_column(self.db)
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
            if is_damage(exc):
                raise JournalDamaged(damaged_message(path, str(exc))) from None
            raise ConfigurationError(unwritable_message(path, exc)) from None
        except OSError as exc:
            self._close_db()
            raise ConfigurationError(unwritable_message(path, exc)) from None
        except BaseException:
            self._close_db()
            raise
        self._in_tx = False
        self._closed = False
        self._execute = self.db.execute
        # Writes not yet applied (see the module doc).
        self._init_kept()
        self._finished_seq = int(
            self._execute("SELECT COALESCE(MAX(seq), 0) FROM finished").fetchone()[0]
        )
        self._prune_after = 0.0
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
        if self.failure is not None or self._transaction_lost():
            raise JournalUnavailable(self.failure or "cannot be written")
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
            self._transaction_lost(exc)
            raise JournalUnavailable(self.failure or describe(exc)) from None

    def _write(self, sql: str, params: tuple[Any, ...]) -> int:
        return self._now(sql, params, changes=1).rowcount

    def _apply(self, sql: str, params: Any) -> bool:
        """executemany for :meth:`_flush`: False (the transaction failed) on an error."""
        return self._apply_all([(sql, params)])

    def _apply_all(self, writes: list[tuple[str, Any]]) -> bool:
        """:meth:`_apply` of writes that stand or fall together (logged only if all
        were applied: a failure rolls them all back, and what they wrote is still kept)."""
        try:
            for sql, params in writes:
                self.db.executemany(sql, params)
        except sqlite3.Error as exc:
            self._fail(exc)
            return False
        self._log.extend((sql, params, True) for sql, params in writes)
        return True

    def _flush(self) -> bool:
        """Apply the writes kept in memory (inside the open transaction); False, and
        all of them still kept, if the journal cannot be written."""
        if self.failure is not None:
            return False
        if self._transaction_lost():
            return False
        db = self.db
        if self._gone or self._done:
            # Removals and finished msgids stand or fall together: a failure between
            # them would leave the removal alone in the log, and the replay (committed
            # alone) would forget a finished job whose resend must not run again.
            writes: list[tuple[str, Any]] = []
            spans, lone = seq_spans(self._gone)
            # A span of finished jobs (DONEs come back in hand-out order) is one
            # range delete: ~1.5 us a job less than a statement per row.
            if spans:
                writes.append(("DELETE FROM jobs WHERE seq BETWEEN ? AND ?", spans))
            if lone:
                writes.append(("DELETE FROM jobs WHERE seq = ?", lone))
            if self._done:
                writes.append((INSERT_FINISHED, self._done))
            if not self._apply_all(writes):
                return False
            self._gone.clear()
            self._done = []  # a new list: the log keeps this one
        if self._new:
            rows = list(self._new.values())
            before = db.total_changes
            if not self._apply_all(inserts(rows)):
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

    def _transaction_lost(self, cause: BaseException | None = None) -> bool:
        """True if SQLite ended our open transaction itself, on an error of a statement
        (a read's I/O error rolls it back; ``cause``, when known): taken as a failed
        write, so its logged writes are replayed and nothing is written outside a
        transaction (each statement would commit on its own). Asked before writes."""
        if not self._in_tx or self.db.in_transaction:
            return False
        self._fail(cause or sqlite3.OperationalError("the transaction was rolled back by an error"))
        return True

    def commit(self) -> bool:
        """Make every change so far durable (one sync); False if there was none, or
        if the journal cannot be written now: then nothing is lost, :attr:`pending`
        stays, and a later call tries again (at most every ``RETRY_INTERVAL``)."""
        retrying = self.failure is not None
        if not self.pending and not retrying:
            return False
        # A write made at once may fail with nothing kept: it is retried all the same,
        # or the failure (new jobs refused) would last until something else is written.
        if retrying and (time.monotonic() < self._retry_at or not self._replay()):
            return False
        if retrying and self._log and not self._commit_replayed():
            return False
        if not self._flush():
            return False
        # The commit count is stored only with a commit that a new mark follows.
        marking = self._lock is not None and time.monotonic() >= self._mark_at

        def last_writes() -> None:
            if self._finished_added:
                self._prune_finished(self._finished_clock())
            if marking:
                self._execute(
                    "UPDATE meta SET value = ? WHERE key = 'commits'", (self.commits + 1,)
                )

        if not self._end(last_writes):
            return False
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

    def _commit_replayed(self) -> bool:
        """Commit the replayed writes alone before the kept ones join them: while
        COMMIT keeps failing the kept writes stay merged in memory, and the
        replay stays what the first failed transaction held (not every change
        since, one copy each, replayed at every retry)."""
        if not self._end():
            return False
        self._begin(0)
        return True

    def _end(self, last_writes: Callable[[], None] | None = None) -> bool:
        """COMMIT the open transaction (after ``last_writes``); False if it failed."""
        try:
            if last_writes is not None:
                last_writes()
            self._execute("COMMIT")
        except sqlite3.Error as exc:
            self._fail(exc)
            return False
        self._in_tx = False
        self._log.clear()
        return True

    def _replay(self) -> bool:
        """After a failure: a new transaction with the writes the failed one had applied."""
        self.failure, cause = None, self.failure
        if cause == DISK_FULL:
            self._empty_wal()
        try:
            self._execute("BEGIN")
            self._in_tx = True
            # Nothing to replay (a write made at once failed): a write all the same,
            # or an empty COMMIT would pass with the lock still held elsewhere.
            for sql, params, many in self._log or [_PROBE]:
                if many:
                    self.db.executemany(sql, params)
                else:
                    self._execute(sql, params)
        except sqlite3.Error as exc:
            self.failure = cause
            self._fail(exc)
            return False
        return True

    def _empty_wal(self) -> None:
        """On a full disk, before a retry: copy the committed WAL into the journal file
        and cut the WAL to nothing, giving its space back (a WAL holds many copies of
        a page; the file, one). Needs room for the file's new pages: fails until then."""
        with contextlib.suppress(sqlite3.Error):
            self._execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

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


def seq_spans(seqs: Iterable[int]) -> tuple[list[tuple[int, int]], list[tuple[int]]]:
    """``seqs`` as runs of consecutive numbers, ``(first, last)`` for each run of
    two or more, and ``(seq,)`` for each one alone (every seq once, in order)."""
    spans: list[tuple[int, int]] = []
    lone: list[tuple[int]] = []
    ordered = sorted(seqs)
    start = 0
    for index in range(1, len(ordered) + 1):
        if index == len(ordered) or ordered[index] != ordered[index - 1] + 1:
            if index - start > 1:
                spans.append((ordered[start], ordered[index - 1]))
            else:
                lone.append((ordered[start],))
            start = index
    return spans, lone


def inserts(rows: list[list[Any]]) -> list[tuple[str, list[Any]]]:
    """The executemany calls that insert ``rows`` (new jobs' values), in order:
    :data:`.schema.INSERT_CHUNK` rows a statement, then the rest one a statement."""
    full = len(rows) - len(rows) % INSERT_CHUNK
    writes: list[tuple[str, list[Any]]] = []
    if full:
        chunks = [
            list(chain.from_iterable(rows[i : i + INSERT_CHUNK]))
            for i in range(0, full, INSERT_CHUNK)
        ]
        writes.append((INSERT_JOBS, chunks))
    if full < len(rows):
        writes.append((INSERT_JOB, rows[full:]))
    return writes
