"""The router's journal on PostgreSQL: the same store as the SQLite
:class:`.store.Journal`, shared by the routers of one group (one leads).

The tables live in the schema ``emq_<group>`` (:mod:`.pg_schema`, created and
migrated by the journal when it opens). Writes are kept in memory as the
SQLite journal keeps them (new rows, column changes merged per row, deleted
rows, finished msgids) and applied a few statements per kind, never one per
row: new rows by binary COPY into a temporary table and one INSERT from it
(twice an ``executemany``'s rate), changes by one UPDATE from arrays per set
of columns, deletes by one ``seq = ANY(array)``, finished msgids by one
``executemany`` (pipeline mode), in the transaction that
:meth:`PostgresJournal.commit` ends: one transaction,
one COMMIT per router loop iteration (group commit). commit() returns True
only once COMMIT returned. Writes that must happen at once (an add that may
meet a msgid stored already, parcels, SCHEDULEs) open that transaction early;
reads whose answer must include kept writes apply them into it first.

Durability (``sync``): ``full`` (the default) commits with
``synchronous_commit = on``: when COMMIT returned the transaction is in the
server's WAL on disk (and on a synchronous standby, if the server has one).
``normal`` commits with ``synchronous_commit = off``: the server acknowledges
before its WAL is flushed, so a crash of the PostgreSQL server (or its
machine) may lose the last acknowledged commits (up to about three times
``wal_writer_delay``, 600 ms by default); a crash of the router loses nothing
either way. The database is never left inconsistent.

Fencing: ``fence(cursor)`` (:func:`.leadership.fence`, bound to the leader's
epoch) runs as the last statement of every transaction the journal commits.
If it raises :class:`LeadershipLost`, or any statement fails (the connection
lost or terminated, the server out of disk), the transaction is rolled back
and the journal is dead: that call and every later one raise
:class:`LeadershipLost`, :attr:`~PostgresJournal.closed` is True and the
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
import struct
import time
from collections import Counter
from collections.abc import Callable, Container, Iterator
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from django_eventmq.errors import ConfigurationError
from django_eventmq.protocol.batch import unpack_jobs
from django_eventmq.router.journal.api import KeptWrites
from django_eventmq.router.journal.commit import PRUNE_INTERVAL
from django_eventmq.router.journal.parcels import parcel_digest
from django_eventmq.router.journal.pg_schema import (
    CHANGE_TYPES,
    DUE,
    FIND,
    INSERT_JOB,
    NEW_TYPES,
    NEXT_DUE,
    POISONED_ROWS,
    RECOVER,
    SIZE,
    STAGE_COPY,
    STAGE_CREATE,
    STAGE_MOVE,
    WAITING_AFTER,
    WAITING_FIRST,
    decoded_row,
    encoded_row,
    migrate,
    schema_name,
)
from django_eventmq.router.journal.schedules import _unpack
from django_eventmq.router.journal.schema import (
    WAITING,
    JobState,
    Row,
    known_state,
    new_row,
)
from django_eventmq.router.leadership import LeadershipLost

if TYPE_CHECKING:
    from django_eventmq.router.journal.api import JournalLike
    from django_eventmq.router.journal.store import Journal

log = logging.getLogger("django_eventmq.router")

#: What the fence is given: a cursor inside the transaction being committed.
Fence = Callable[[psycopg.Cursor[Any]], None]

#: The share of the lease a successful fence vouches for (:meth:`lease_valid`).
LEASE_SHARE = 0.8


def public_dsn(dsn: str) -> str:
    """``dsn`` without its password (for logs, MONITOR and :attr:`PostgresJournal.path`)."""
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


class PostgresJournal(KeptWrites):
    """The job store on PostgreSQL (see the module doc). Every method runs in the
    router's thread, as the SQLite journal's do; the public surface is the one
    :class:`.api.JournalLike` names."""

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
        #: Row changes not yet committed.
        self.pending = 0
        #: Why the journal cannot be written (None while it serves; set once it is dead).
        self.failure: str | None = None
        self._fence = fence
        self._fenced_at = -math.inf
        self._dead: str | None = None
        self._closed = False
        self._in_tx = False
        self._init_kept()
        self._prune_after = 0.0
        try:
            given = psycopg.conninfo.conninfo_to_dict(dsn)
        except psycopg.Error as exc:
            raise ConfigurationError(
                f"JOURNAL_URL is not a PostgreSQL DSN ({exc}); write it as "
                "postgresql://user@host:port/database"
            ) from None
        # A server (or the way to it) gone silent must not hang the leader in a
        # read: TCP keepalives end the connection within about a lease, unless
        # the DSN says otherwise.
        keepalive: dict[str, Any] = {
            "keepalives": 1,
            "keepalives_idle": max(1, int(lease_seconds)),
            "keepalives_interval": 1,
            "keepalives_count": 3,
            "tcp_user_timeout": int(lease_seconds * 1000) + 3000,
        }
        keepalive["application_name"] = f"emq_router {group} journal"  # in pg_stat_activity
        options = {key: value for key, value in keepalive.items() if key not in given}
        try:
            conninfo = psycopg.conninfo.make_conninfo(dsn, **options)
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
        if self._in_tx:
            with contextlib.suppress(psycopg.Error):
                self.conn.execute("ROLLBACK")
        self._in_tx = False
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

    def _flush(self) -> None:
        """Apply the writes kept in memory inside the open transaction (see the module doc)."""
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
        if self._gone:
            self._now("DELETE FROM jobs WHERE seq = ANY(%s)", (list(self._gone),))
            self._gone.clear()
        if self._done:
            done = [(seq, msgid.encode(), at) for seq, msgid, at in self._done]
            self._now("INSERT INTO finished (seq, msgid, at) VALUES (%s, %s, %s)", done, many=True)
            self._done = []

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
        lease: for ``lease_seconds * 0.8`` after it began. Always True without a fence."""
        if self._dead is not None:
            return False
        return self._fence is None or now < self._fenced_at + self.lease_seconds * LEASE_SHARE

    def _end(self) -> None:
        with self._guard():
            self._tx()
            self._flush()
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

    # -- jobs: writes (kept; see the module doc) ---------------------------------------------
    def _begin(self, changes: int = 1) -> None:
        """A write kept in memory (:class:`.api.KeptWrites`): counted, applied later."""
        self._alive()
        self.pending += changes

    def _insert_now(self, values: list[Any]) -> bool:
        return self._write(INSERT_JOB, encoded_row(values)) == 1

    def add_many(self, rows: list[list[Any]]) -> set[int]:
        """Insert new jobs at once (one executemany); the seqs of those stored."""
        if not rows:
            return set()
        self._fresh()
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

    def owner_of(self, msgid: str) -> str | None:
        """The CURVE key that sent job ``msgid``: None if not held, "" if held with none known."""
        self._fresh()
        found = self._select("SELECT owner FROM jobs WHERE msgid = %s", (msgid.encode(),))
        if found:
            return str(found[0][0] or "")
        return "" if self.parcels_holding(msgid) else None

    def poisoned(self, limit: int = 100) -> list[tuple[Row, str]]:
        self._fresh()
        rows = self._select(POISONED_ROWS, (limit,))
        return [(decoded_row(values[:-1]), values[-1].decode()) for values in rows]

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

    # -- parcels (see parcels.py) ----------------------------------------------------------------
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
        """Store ``count`` jobs of ``queue`` (the JOBS frame ``jobs``) as one row; they
        take seqs ``seq .. seq + count - 1``."""
        digest = parcel_digest(jobs) if digest is None else digest
        with self._guard():
            self._now(
                "INSERT INTO parcels (seq, count, queue, nprio, guarantee, headers, client,"
                " accepted, jobs) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (seq, count, queue.encode(), -priority, guarantee, headers, client, accepted, jobs),
            )
            # A digest left by a parcel lost elsewhere gives way (SQLite's REPLACE).
            self._now("DELETE FROM parcel_digests WHERE digest = %s OR seq = %s", (digest, seq))
            self._now("INSERT INTO parcel_digests (seq, digest) VALUES (%s, %s)", (seq, digest))
            self.pending += count
        self._parcels[queue] += 1

    def holds_parcel(self, digest: bytes) -> bool:
        """True if a parcel not opened yet has the JOBS frame of this digest."""
        if not self._parcels.total():
            return False
        return bool(
            self._select(
                "SELECT 1 FROM parcel_digests JOIN parcels USING (seq) WHERE digest = %s",
                (digest,),
            )
        )

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
            "SELECT nprio, seq FROM parcels WHERE queue = %s ORDER BY nprio, seq LIMIT 1",
            (queue.encode(),),
        )
        if not rows or (upto is not None and tuple(rows[0]) > upto):
            return None
        return int(rows[0][1])

    def parcels_holding(self, msgid: str) -> list[int]:
        """Parcels whose JOBS frame contains ``msgid`` (open them, then :meth:`find`)."""
        if not self._parcels.total():
            return []
        self._fresh()
        rows = self._select(
            "SELECT seq FROM parcels WHERE position(%s IN jobs) > 0 ORDER BY seq",
            (msgid.encode(),),
        )
        return [int(seq) for (seq,) in rows]

    def open_parcel(self, seq: int, skip: Container[str]) -> tuple[str, int]:
        """Turn parcel ``seq`` into a WAITING row per job. Returns its queue and how
        many jobs were dropped: their msgid was held already, or is in ``skip``."""
        self._fresh()
        (count, queue, nprio, guarantee, headers, client, accepted, frame) = self._select(
            "SELECT count, queue, nprio, guarantee, headers, client, accepted, jobs"
            " FROM parcels WHERE seq = %s",
            (seq,),
        )[0]
        name = queue.decode()
        jobs = unpack_jobs(frame, max_jobs=count, max_bytes=len(frame))
        rows = [
            new_row(seq + i, msgid, name, -nprio, WAITING, guarantee, headers, job[3], client,
                    accepted)
            for i, job in enumerate(jobs)
            if (msgid := job[0].decode()) not in skip
        ]  # fmt: skip
        with self._guard():
            stored = self._insert_jobs(rows) if rows else 0
            self._now("DELETE FROM parcels WHERE seq = %s", (seq,))
            self._now("DELETE FROM parcel_digests WHERE seq = %s", (seq,))
            self.pending += len(rows) + 1
        self._parcels[name] -= 1
        return name, int(count) - stored

    # -- finished msgids (see finished.py) -------------------------------------------------
    def finished_since(self, since: float) -> list[tuple[str, float]]:
        """The newest ``finished_keep`` msgids finished at or after ``since``, oldest first."""
        self._fresh()
        rows = self._select(
            "SELECT msgid, at FROM finished WHERE at >= %s ORDER BY seq DESC LIMIT %s",
            (since, self.finished_keep),
        )
        rows.reverse()
        return [(msgid.decode(), float(at)) for msgid, at in rows]

    def prune_finished(self) -> None:
        """Drop finished msgids past the window or the count now (at start-up)."""
        self._fresh()
        with self._guard():
            self._tx()
            self.pending += 1
            self._prune_finished(self._finished_clock(), force=True)

    def finished_count(self) -> int:
        self._fresh()
        return int(self._select("SELECT COUNT(*) FROM finished")[0][0])

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

    # -- SCHEDULE / UNSCHEDULE waiting for a scheduler (see schedules.py) ---------------------
    def add_schedule(
        self, frames: list[bytes], *, unschedule: bool, job_key: str, timing_key: str
    ) -> None:
        """Keep a SCHEDULE or UNSCHEDULE (its frames as received) for a scheduler."""
        packed = b"".join(struct.pack(">I", len(frame)) + frame for frame in frames)
        self._write(
            "INSERT INTO schedules (unschedule, job_key, timing_key, frames)"
            " VALUES (%s, %s, %s, %s)",
            (unschedule, job_key.encode(), timing_key.encode(), packed),
        )

    def drop_schedules(self, job_key: str, timing_key: str) -> int:
        """An UNSCHEDULE's effect on kept SCHEDULEs: drop the job's (all timings if
        ``timing_key`` is empty). Returns how many were dropped."""
        if timing_key:
            return self._write(
                "DELETE FROM schedules WHERE NOT unschedule AND job_key = %s AND timing_key = %s",
                (job_key.encode(), timing_key.encode()),
            )
        return self._write(
            "DELETE FROM schedules WHERE NOT unschedule AND job_key = %s", (job_key.encode(),)
        )

    def schedules(self, limit: int = 1000) -> list[tuple[int, bool, list[bytes]]]:
        """The oldest ``limit`` kept messages, oldest first: ``(seq, is UNSCHEDULE, frames)``."""
        return [
            (int(seq), bool(unschedule), _unpack(packed))
            for seq, unschedule, packed in self._select(
                "SELECT seq, unschedule, frames FROM schedules ORDER BY seq LIMIT %s", (limit,)
            )
        ]

    def delete_schedule(self, seq: int) -> None:
        self._write("DELETE FROM schedules WHERE seq = %s", (seq,))

    def schedule_count(self) -> int:
        return int(self._select("SELECT COUNT(*) FROM schedules")[0][0])


if TYPE_CHECKING:

    def _both_are_journals(a: Journal, b: PostgresJournal) -> list[JournalLike]:
        """mypy checks here that each backend has the surface the router uses."""
        return [a, b]
