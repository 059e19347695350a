"""The PostgreSQL journal's connection, kept writes, commits and failures: the
base of :class:`.postgres.PostgresJournal`, as :mod:`.commit` is the SQLite
journal's.

Writes are kept in memory as the SQLite journal keeps them
(:class:`.api.KeptWrites`: new rows, column changes merged per row, deleted
rows, finished msgids; and parcels) and applied a few statements per kind,
never one per row: parcels and their digests in one round trip (pipeline
mode, with the transaction's BEGIN), new rows by binary COPY into a
temporary table and one INSERT from it (twice an ``executemany``'s rate),
changes by one UPDATE from arrays per set of columns, deletes by one
``seq = ANY(array)``, finished msgids by one ``executemany`` (pipeline
mode), in the transaction that :meth:`PgJournalBase.commit` ends: one
transaction, one COMMIT per router loop iteration (group commit). commit()
returns True only once COMMIT returned. Writes that must happen at once (an
add that may meet a msgid stored already, SCHEDULEs) open that transaction
early; reads whose answer must include kept writes apply them into it first.

Fencing: ``fence(cursor)`` (:func:`.leadership.fence`, bound to the leader's
epoch) runs as the last statement of every transaction the journal commits.
If it raises :class:`LeadershipLost`, or any statement fails (the connection
lost or terminated, the server out of disk), the transaction is rolled back
and the journal is dead: that call and every later one raise
:class:`LeadershipLost`, :attr:`~PgJournalBase.closed` is True and the
kept writes are dropped, as in a crash (nothing that depended on them was
released). (A connection lost while COMMIT itself is under way leaves the
outcome unknown, as for any database client: what it held may be stored, and
its jobs are then duplicates when resent, refused by msgid.) It never
retries: the router steps down, and opens a new journal when it leads again.

The connection sets ``idle_in_transaction_session_timeout`` and
``lock_timeout`` to the lease, so a leader stopped inside a transaction cannot
hold the lease row's lock (nor its writes) past it, nor wait longer for it;
and TCP keepalives (unless the DSN sets its own), so a silent server ends the
connection instead of hanging the leader. It needs a session of its own: a
pooler in transaction mode (PgBouncer's ``pool_mode = transaction``) would
drop those settings and its temporary table between transactions.
"""

from __future__ import annotations

import contextlib
import logging
import math
import select
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, NoReturn
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from django_eventmq.errors import ConfigurationError
from django_eventmq.router.journal.api import KeptWrites
from django_eventmq.router.journal.commit import PRUNE_INTERVAL
from django_eventmq.router.journal.pg_schema import (
    CHANGE_TYPES,
    INSERT_PARCEL,
    NEW_TYPES,
    STAGE_COPY,
    STAGE_CREATE,
    STAGE_MOVE,
    encoded_row,
    migrate,
    schema_name,
)
from django_eventmq.router.leadership import LeadershipLost, group_conninfo

log = logging.getLogger("django_eventmq.router")

#: What the fence is given: a cursor inside the transaction being committed.
Fence = Callable[[psycopg.Cursor[Any]], None]

#: The share of the lease a successful fence vouches for (:meth:`lease_valid`).
LEASE_SHARE = 0.8


def public_dsn(dsn: str) -> str:
    """``dsn`` without its password (logs, MONITOR, :attr:`.postgres.PostgresJournal.path`)."""
    if "://" in dsn:
        parts = urlsplit(dsn)
        netloc = parts.netloc
        if "@" in netloc:
            user, host = netloc.rsplit("@", 1)
            netloc = user.split(":", 1)[0] + "@" + host
        query = "&".join(
            item for item in parts.query.split("&") if not item.lower().startswith("password=")
        )
        return urlunsplit((parts.scheme, netloc, parts.path, query, ""))
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return "(unreadable DSN)"
    params.pop("password", None)
    return psycopg.conninfo.make_conninfo("", **params)


class PgJournalBase(KeptWrites):
    """The open PostgreSQL journal: its connection, the kept writes applied
    (:meth:`_flush`), commits, the fence and the failures that kill it (see the
    module doc). :class:`.postgres.PostgresJournal` adds the stores on top."""

    def __init__(
        self,
        dsn: str,
        *,
        group: str = "default",
        sync: str = "full",
        fence: Fence | None = None,
        lease_seconds: float = 5.0,
    ) -> None:
        """Connect, create or migrate ``emq_<group>``, load what the router asks first.

        :class:`ConfigurationError` for a bad group name, ``sync`` value or a
        schema newer than this release; :class:`LeadershipLost` if the server
        cannot be reached or fails meanwhile (the router stands by and tries again).
        """
        if sync not in ("full", "normal"):
            raise ConfigurationError(f"JOURNAL_SYNC must be 'full' or 'normal', not {sync!r}")
        if not lease_seconds > 0:
            raise ConfigurationError(f"LEASE_SECONDS must be above 0, not {lease_seconds!r}")
        self.schema = schema_name(group)
        self.group = group
        #: Where the journal is: the DSN without its password, then ``#group``.
        self.path = f"{public_dsn(dsn)}#{group}"
        self.lease_seconds = lease_seconds
        self.syncs = 0
        #: Why the journal cannot be written (None while it serves; set once it is dead).
        self.failure: str | None = None
        self._fence = fence
        self._fenced_at = -math.inf
        self._dead: str | None = None
        self._closed = False
        self._in_tx = False
        self._init_kept()
        #: Parcels kept until the next flush (:meth:`_flush_parcels`): their INSERT
        #: statements' parameters.
        self._new_parcels: list[tuple[Any, ...]] = []
        self._prune_after = 0.0
        # A server (or the way to it) gone silent must not hang the leader in a
        # read: TCP keepalives end the connection within about a lease, unless
        # the DSN says otherwise.
        conninfo, _ = group_conninfo(
            dsn,
            {
                "keepalives": 1,
                "keepalives_idle": max(1, int(lease_seconds)),
                "keepalives_interval": 1,
                "keepalives_count": 3,
                "tcp_user_timeout": int(lease_seconds * 1000) + 3000,
                "application_name": f"emq_router {group} journal",  # in pg_stat_activity
            },
        )
        try:
            self.conn: psycopg.Connection[Any] = psycopg.connect(conninfo, autocommit=True)
        except psycopg.Error as exc:
            raise LeadershipLost(f"journal {self.path}: cannot connect: {exc}".strip()) from None
        # Neither a transaction left idle (a leader stopped) nor a statement waiting
        # for a lock (the fence behind a takeover) outlives the lease.
        lease_ms = str(int(lease_seconds * 1000))
        try:
            migrate(self.conn, group)
            self.conn.execute(
                "SELECT set_config('search_path', %s, false),"
                " set_config('synchronous_commit', %s, false),"
                " set_config('idle_in_transaction_session_timeout', %s, false),"
                " set_config('lock_timeout', %s, false)",
                (self.schema, "on" if sync == "full" else "off", lease_ms, lease_ms),
            )
            self.conn.execute(STAGE_CREATE)
            self._finished_seq = int(self._one("SELECT COALESCE(MAX(seq), 0) FROM finished"))
            #: Parcels stored, per queue (no query to know a queue has none).
            self._parcels: Counter[str] = Counter(
                {
                    queue.decode(): n
                    for queue, n in self.conn.execute(
                        "SELECT queue, COUNT(*) FROM parcels GROUP BY queue"
                    )
                }
            )
            #: The digest of each parcel not opened yet, and its seq (and back): the
            #: leader is the group's only writer, so they answer holds_parcel without
            #: a query. Joined: a digest whose parcel is gone holds nothing.
            self._digests: dict[bytes, int] = {
                bytes(digest): int(seq)
                for digest, seq in self.conn.execute(
                    "SELECT digest, seq FROM parcel_digests JOIN parcels USING (seq)"
                )
            }
            self._digest_of: dict[int, bytes] = {v: k for k, v in self._digests.items()}
        except psycopg.Error as exc:
            self._close_conn()
            raise LeadershipLost(f"journal {self.path}: cannot open: {exc}".strip()) from None
        except BaseException:
            self._close_conn()
            raise

    # -- failures: the journal is dead ----------------------------------------------------
    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """Around every use of the connection: a failure kills the journal."""
        if self._dead is not None:
            raise LeadershipLost(self._dead)
        try:
            yield
        except Exception as exc:  # any failure ends the transaction: dead
            self._die(exc)

    def _alive(self) -> None:
        if self._dead is not None:
            raise LeadershipLost(self._dead)

    def _die(self, exc: BaseException) -> NoReturn:
        """Roll back, drop the kept writes, close; LeadershipLost now and from every later call."""
        if isinstance(exc, LeadershipLost):
            reason = str(exc) or f"journal {self.path}: leadership lost"
        else:
            reason = f"journal {self.path}: {type(exc).__name__}: {str(exc).strip()}"
        self._dead = self.failure = reason
        self._closed = True
        self.pending = 0
        self._new.clear()
        self._new_msgids.clear()
        self._changed.clear()
        self._gone.clear()
        self._done = []
        self._new_parcels.clear()
        if self._in_tx:
            with contextlib.suppress(psycopg.Error):
                self.conn.execute("ROLLBACK")
        self._in_tx = False
        if not isinstance(exc, LeadershipLost):
            deposed = self._deposed()
            if deposed is not None:
                # A deposed leader's writes can fail before its fence does (the new
                # leader took the same finished seqs): the cause is the lost lease.
                reason = f"{deposed} (its last transaction failed first: {reason})"
                exc = LeadershipLost(reason)
                self._dead = self.failure = reason
        self._close_conn()
        log.error("%s; this router stops writing (its open transaction is rolled back)", reason)
        if isinstance(exc, LeadershipLost):
            raise exc
        if isinstance(exc, psycopg.Error):
            raise LeadershipLost(reason) from exc
        raise exc

    # -- statements ----------------------------------------------------------------------
    def _tx(self) -> None:
        if not self._in_tx:
            self.conn.execute("BEGIN")
            self._in_tx = True

    def _now(self, query: Any, params: Any = (), *, many: bool = False) -> psycopg.Cursor[Any]:
        """A write applied at once, inside the open transaction (opened if need be)."""
        self._tx()
        cursor = self.conn.cursor()
        if many:
            cursor.executemany(query, params)
        else:
            cursor.execute(query, params)
        return cursor

    def _insert_jobs(self, rows: list[list[Any]]) -> int:
        """Insert new jobs (:func:`new_row` values) inside the open transaction, skipping
        those whose msgid or seq is held; returns how many were stored."""
        self._tx()
        cursor = self.conn.cursor()
        with cursor.copy(STAGE_COPY) as copy:
            copy.set_types(NEW_TYPES)
            for row in rows:
                copy.write_row(encoded_row(row))
        return cursor.execute(STAGE_MOVE).rowcount

    def _select(self, query: Any, params: Any = ()) -> list[Any]:
        with self._guard():
            return self.conn.execute(query, params).fetchall()
        raise AssertionError("unreachable")  # pragma: no cover

    def _one(self, query: Any, params: Any = ()) -> Any:
        row = self.conn.execute(query, params).fetchone()
        return None if row is None else row[0]

    def _kept(self) -> bool:
        return bool(self._new_parcels) or super()._kept()

    def _flush_parcels(self) -> None:
        """Store the parcels kept (:meth:`.pg_stores.PgParcelStore.add_parcel`) in one
        round trip (pipeline mode), the transaction's BEGIN with them if need be."""
        parcels = self._new_parcels
        seqs = [parcel[0] for parcel in parcels]
        # A parcel whose digest gave way to a later one's (the same frame) has none.
        digests = [(seq, self._digest_of[seq]) for seq in seqs if seq in self._digest_of]
        with self.conn.pipeline():
            if not self._in_tx:
                self.conn.execute("BEGIN")
                self._in_tx = True
            cursor = self.conn.cursor()
            cursor.executemany(INSERT_PARCEL, parcels)
            # A digest left by a parcel lost elsewhere gives way, as the same frame's
            # digest of an earlier parcel does.
            cursor.execute(
                "DELETE FROM parcel_digests WHERE digest = ANY(%s) OR seq = ANY(%s)",
                ([digest for _, digest in digests], seqs),
            )
            cursor.executemany("INSERT INTO parcel_digests (seq, digest) VALUES (%s, %s)", digests)
        parcels.clear()

    def _flush(self) -> None:
        """Apply the writes kept in memory inside the open transaction (see the module doc)."""
        if self._new_parcels:
            self._flush_parcels()
        # Deletes first: a new row may reuse the msgid of a deleted one (commit.py's doc).
        if self._gone:
            self._now("DELETE FROM jobs WHERE seq = ANY(%s)", (list(self._gone),))
            self._gone.clear()
        if self._done:
            done = [(seq, msgid.encode(), at) for seq, msgid, at in self._done]
            self._now("INSERT INTO finished (seq, msgid, at) VALUES (%s, %s, %s)", done, many=True)
            self._done = []
        if self._new:
            rows = list(self._new.values())
            stored = self._insert_jobs(rows)
            self._new.clear()
            self._new_msgids.clear()
            if stored != len(rows):  # the router asks holds() first: this is a bug, say so
                log.error(
                    "journal: %d new job(s) not stored: msgid already held", len(rows) - stored
                )
        if self._changed:
            groups: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
            for seq, columns in self._changed.items():
                names = tuple(sorted(columns))
                if "reason" in columns:
                    columns = {**columns, "reason": columns["reason"].encode()}
                groups.setdefault(names, []).append((*(columns[n] for n in names), seq))
            for names, params in groups.items():
                # One statement per set of columns: arrays, unnested to a row per job.
                arrays_of = [list(values) for values in zip(*params, strict=True)]
                arrays = sql.SQL(", ").join(
                    sql.SQL("%s::{}[]").format(sql.SQL(CHANGE_TYPES[name]))
                    for name in (*names, "seq")
                )
                assignments = sql.SQL(", ").join(
                    sql.SQL("{0} = v.{0}").format(sql.Identifier(name)) for name in names
                )
                query = sql.SQL(
                    "UPDATE jobs SET {} FROM unnest({}) AS v({}) WHERE jobs.seq = v.seq"
                ).format(
                    assignments,
                    arrays,
                    sql.SQL(", ").join(sql.Identifier(name) for name in (*names, "seq")),
                )
                self._now(query, arrays_of)
            self._changed.clear()

    def _fresh(self) -> None:
        """Before a read whose answer must include the kept writes."""
        if self._kept():
            with self._guard():
                self._flush()
        else:
            self._alive()

    def _write(self, query: Any, params: Any, changes: int = 1) -> int:
        with self._guard():
            count = self._now(query, params).rowcount
            self.pending += changes
            return count
        raise AssertionError("unreachable")  # pragma: no cover

    def _deposed(self) -> str | None:
        """After a failed transaction: why this router no longer leads, if it does not
        (the fence alone, in a transaction rolled back); None if it still leads or the
        connection cannot tell."""
        if self._fence is None:
            return None
        try:
            self.conn.execute("BEGIN")
            try:
                self._fence(self.conn.cursor())
            finally:
                self.conn.execute("ROLLBACK")
        except LeadershipLost as lost:
            return str(lost)
        except psycopg.Error:
            return None
        return None

    # -- commits and the lease -------------------------------------------------------------
    def commit(self) -> bool:
        """Make every change so far durable in one transaction (fenced); False if there
        was none. :class:`LeadershipLost` (the journal is dead) if it failed."""
        self._alive()
        if not self.pending and not self._in_tx:
            return False
        self._end()
        self.syncs += 1
        return True

    def renew(self) -> None:
        """The lease heartbeat: a transaction holding the fence (and whatever was kept:
        committed with it)."""
        self._alive()
        changes = self.pending
        self._end()
        if changes:
            self.syncs += 1

    def lease_valid(self, now: float) -> bool:
        """True while the last successful fence (monotonic ``now``) vouches for the
        lease: for ``lease_seconds * 0.8`` after it began, and only while the server
        has not ended the connection (its goodbye waits unread on the socket: a
        standby takes over at once then, the lease still running). Always True
        without a fence."""
        if self._dead is not None:
            return False
        if self._fence is None:
            return True
        return now < self._fenced_at + self.lease_seconds * LEASE_SHARE and not self._has_input()

    def _has_input(self) -> bool:
        """The server sent something unasked on this idle connection: between queries
        it sends nothing but the notice that it ends it (or the connection closed)."""
        try:
            readable, _, _ = select.select([self.conn.fileno()], [], [], 0)
        except (OSError, ValueError, psycopg.Error):  # closed: the renewal says why
            return True
        return bool(readable)

    def _end(self) -> None:
        with self._guard():
            self._flush()
            self._tx()
            if self._finished_added:
                self._prune_finished(self._finished_clock())
            started = time.monotonic()
            if self._fence is not None:
                self._fence(self.conn.cursor())
            self.conn.execute("COMMIT")
            self._in_tx = False
            self.pending = 0
            if self._fence is not None:
                self._fenced_at = started

    def close(self) -> None:
        """Commit what is kept and close (idempotent, never raises). What cannot be
        committed is lost here, as in a crash: nothing that depended on it was released."""
        if self._closed:
            return
        try:
            self.commit()
        except Exception:  # logged once by _die; close() must not raise
            return
        self._closed = True
        self._close_conn()

    @property
    def closed(self) -> bool:
        """True once closed, or dead (a failed transaction, leadership lost)."""
        return self._closed

    def _close_conn(self) -> None:
        conn = getattr(self, "conn", None)
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    # -- kept writes (:class:`.api.KeptWrites`) and finished msgids ------------------------
    def _begin(self, changes: int = 1) -> None:
        """A write kept in memory (:class:`.api.KeptWrites`): counted, applied later."""
        self._alive()
        self.pending += changes

    def _prune_finished(self, now: float, *, force: bool = False) -> None:
        """Drop finished msgids past the window or the count (inside the open transaction):
        two deletes from the oldest end, at most once per ``PRUNE_INTERVAL``."""
        if now < self._prune_after and not force:
            return
        self._prune_after = now + PRUNE_INTERVAL
        self._finished_added = False
        self._now(
            "DELETE FROM finished WHERE seq <= %s", (self._finished_seq - self.finished_keep,)
        )
        self._now(
            "DELETE FROM finished WHERE seq < COALESCE((SELECT MIN(seq) FROM finished"
            " WHERE at >= %s), %s)",
            (now - self.finished_window, self._finished_seq + 1),
        )
