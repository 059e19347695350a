"""Leadership of a router group, held as a lease row in PostgreSQL.

Several routers of one *group* share one PostgreSQL journal; exactly one of
them leads (serves and writes). The lease is one row in ``emq_<group>.lease``:
an *epoch* that grows by one at every takeover, the member and backend pid
that hold it, and when it runs out. PostgreSQL's clock (``clock_timestamp()``)
decides expiry, never the routers' clocks. A standby takes the lease when there
is none, when it expired, or when the backend pid that holds it is gone from
``pg_stat_activity`` (the leader's connection died), so failover after a crash
takes one standby poll. The leader's journal fences every transaction it
commits with :func:`fence`: an UPDATE that matches only its own epoch, so a
deposed leader's writes fail with :class:`LeadershipLost` instead of landing.

Whoever creates objects in ``emq_<group>`` does it under
``pg_advisory_xact_lock(hashtext('emq_<group>'))`` (see :func:`schema_lock`), so
two routers starting at once do not race on ``CREATE SCHEMA IF NOT EXISTS``.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from django_eventmq.errors import ConfigurationError, EventMQError

log = logging.getLogger("django_eventmq.router")

_T = TypeVar("_T")

#: How a router group may be named; it becomes part of a schema name.
GROUP_RE = re.compile(r"[a-z0-9_]{1,40}")
#: Seconds between two log lines about the same trouble reaching PostgreSQL.
REMIND_SECONDS = 60.0
#: Seconds to wait for a connection when the DSN does not say (libpq waits forever).
CONNECT_TIMEOUT = 5

# The one row of the table has id 1. Times are timestamptz from the DB clock.
_CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS {schema}.lease (
    id smallint PRIMARY KEY CHECK (id = 1),
    epoch bigint NOT NULL,
    member text NOT NULL,
    pid integer,
    since timestamptz NOT NULL,
    renewed timestamptz NOT NULL,
    expires timestamptz NOT NULL,
    failovers bigint NOT NULL DEFAULT 0,
    last_failover timestamptz,
    last_failover_seconds double precision
)"""

_FENCE = """
UPDATE {schema}.lease
   SET renewed = clock_timestamp(),
       expires = clock_timestamp() + make_interval(secs => %s),
       pid = pg_backend_pid()
 WHERE id = 1 AND epoch = %s"""

# The holder is alive when a backend with its pid exists that started before the
# last renewal (a newer backend with the same pid is someone else). backend_start
# is NULL for another role's session without pg_read_all_stats: trust the pid then.
_CLAIM = """
SELECT epoch, member,
       expires <= clock_timestamp() AS expired,
       NOT EXISTS (
           SELECT 1 FROM pg_stat_activity a
            WHERE a.pid = l.pid
              AND (a.backend_start IS NULL OR a.backend_start <= l.renewed)
       ) AS gone
  FROM {schema}.lease l
 WHERE id = 1
   FOR UPDATE NOWAIT"""

_INSERT = """
INSERT INTO {schema}.lease (id, epoch, member, pid, since, renewed, expires)
VALUES (1, 1, %s, pg_backend_pid(), clock_timestamp(), clock_timestamp(),
        clock_timestamp() + make_interval(secs => %s))
ON CONFLICT (id) DO NOTHING
RETURNING epoch"""

_TAKE = """
UPDATE {schema}.lease
   SET epoch = epoch + 1,
       member = %s,
       pid = pg_backend_pid(),
       since = clock_timestamp(),
       renewed = clock_timestamp(),
       expires = clock_timestamp() + make_interval(secs => %s),
       failovers = failovers + 1,
       last_failover = clock_timestamp(),
       last_failover_seconds = extract(epoch FROM clock_timestamp() - renewed)::float8
 WHERE id = 1
RETURNING epoch, last_failover_seconds"""

# Stopping cleanly: the lease runs out now, and "renewed" says when we stopped,
# so the next takeover measures how long the group had no leader.
_RELEASE = """
UPDATE {schema}.lease
   SET expires = clock_timestamp(), renewed = clock_timestamp(), pid = NULL
 WHERE id = 1 AND epoch = %s"""

_INFO = """
SELECT epoch, member, pid,
       extract(epoch FROM since)::float8,
       extract(epoch FROM renewed)::float8,
       extract(epoch FROM expires)::float8,
       failovers,
       extract(epoch FROM last_failover)::float8,
       last_failover_seconds
  FROM {schema}.lease
 WHERE id = 1"""

_LEADER = "SELECT epoch, member FROM {schema}.lease WHERE id = 1"


class LeadershipLost(EventMQError):
    """Another member leads the group now (a newer epoch); stop writing and step down."""


@dataclass(frozen=True)
class LeaderInfo:
    """The lease row of a group: who leads, since when, and its failover record."""

    group: str
    epoch: int
    member: str
    pid: int | None
    #: Unix time (DB clock) this epoch began.
    since: float
    #: Unix time of the last renewal (or of the clean release).
    renewed: float
    #: Unix time the lease runs out.
    expires: float
    #: Times leadership changed hands (takeovers after the first leader).
    failovers: int
    #: Unix time of the last takeover.
    last_failover: float | None
    #: Seconds from the old leader's last renewal to the last takeover.
    last_failover_seconds: float | None


def group_conninfo(dsn: str, defaults: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The connection string for ``dsn`` with ``defaults`` for what it does not set
    (the DSN wins), and its parameters; ConfigurationError if ``dsn`` is not one."""
    try:
        given = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise ConfigurationError(
            f"the journal DSN (JOURNAL_URL) is not a PostgreSQL connection string ({exc}); "
            "write it as postgresql://user@host:port/database"
        ) from None
    extra = {key: value for key, value in defaults.items() if key not in given}
    return make_conninfo(dsn, **extra), given


def check_group(group: str) -> str:
    """Return ``group`` if it can name a router group, else raise ConfigurationError."""
    if not isinstance(group, str) or not GROUP_RE.fullmatch(group):
        raise ConfigurationError(
            f"router group {group!r} is not a valid name: use 1 to 40 characters "
            "from a-z, 0-9 and _ (the GROUP setting or --group), e.g. 'default'"
        )
    return group


@lru_cache(maxsize=256)
def _q(template: str, group: str) -> sql.Composed:
    """``template`` with ``{schema}`` replaced by the group's quoted schema name."""
    return sql.SQL(template).format(schema=sql.Identifier(f"emq_{check_group(group)}"))


def schema_lock(cursor: psycopg.Cursor[Any], group: str) -> None:
    """Take the transaction-scoped lock under which ``emq_<group>`` objects are created."""
    cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"emq_{check_group(group)}",))


def ensure_lease_table(cursor: psycopg.Cursor[Any], group: str) -> None:
    """Create the schema ``emq_<group>`` and its lease table if they do not exist.

    Idempotent and safe when several routers start at once: it runs in a
    transaction (a savepoint inside the caller's) under :func:`schema_lock`.
    """
    schema = sql.Identifier(f"emq_{check_group(group)}")
    with cursor.connection.transaction():
        schema_lock(cursor, group)
        cursor.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
        cursor.execute(_q(_CREATE_TABLE, group))


def fence(cursor: psycopg.Cursor[Any], group: str, epoch: int, lease_seconds: float) -> None:
    """Renew our lease inside the caller's transaction, or raise LeadershipLost.

    The caller runs it as the last statement before COMMIT: the UPDATE matches
    only while ``epoch`` still holds the lease, so a deposed leader's transaction
    is rolled back instead of committed. It also makes this connection the holder
    (its backend pid), so a standby takes over at once when it dies.
    """
    try:
        cursor.execute(_q(_FENCE, group), (float(lease_seconds), epoch))
    except psycopg.errors.UndefinedTable as exc:
        raise LeadershipLost(
            f"router group {group!r}: the lease table emq_{group}.lease is gone "
            f"(we held epoch {epoch}); step down"
        ) from exc
    if cursor.rowcount == 1:
        return
    now = ""
    try:
        cursor.execute(_q(_LEADER, group))
        row = cursor.fetchone()
    except psycopg.Error:  # the message is a courtesy; the fence already failed
        row = None
    if row is not None:
        now = f"; it is led by {row[1]!r} with epoch {row[0]} now"
    raise LeadershipLost(
        f"router group {group!r}: our epoch {epoch} no longer holds the lease{now}"
    )


class Lease:
    """One member's claim on the leadership of a group, on its own connection.

    A standby calls :meth:`try_lead` every heartbeat; the connection stays open
    while it leads, since its backend pid marks the holder until the journal's
    first :func:`fence`. Trouble reaching PostgreSQL is logged once (then every
    :data:`REMIND_SECONDS` at most) and the next call connects again.
    """

    def __init__(self, dsn: str, group: str, member: str, *, lease_seconds: float = 5.0) -> None:
        self.group = check_group(group)
        if not (isinstance(lease_seconds, int | float) and 0 < lease_seconds < 86400):
            raise ConfigurationError(
                f"lease_seconds={lease_seconds!r} cannot work: give the seconds a leader may "
                "go without renewing, more than 0 and less than a day (e.g. LEASE_SECONDS = 5)"
            )
        if not member:
            raise ConfigurationError("a router group member needs a name (e.g. host:port)")
        self._conninfo, self._params = group_conninfo(
            dsn,
            {"connect_timeout": CONNECT_TIMEOUT, "application_name": f"emq_router {group} lease"},
        )
        self.dsn = dsn
        self.member = member
        self.lease_seconds = float(lease_seconds)
        self._conn: psycopg.Connection[Any] | None = None
        self._trouble: str | None = None
        self._trouble_logged = 0.0

    @property
    def where(self) -> str:
        """The server, without the password, for log lines."""
        p = self._params
        return f"{p.get('host', '')}:{p.get('port', '5432')}/{p.get('dbname', '')}"

    def try_lead(self) -> int | None:
        """Take the lease if it is free, expired or its holder is gone; return the epoch.

        ``None`` when another member holds it, when the row is locked (a leader's
        transaction is renewing it: not now), or when PostgreSQL cannot be reached.
        """
        taken = self._attempt(self._claim)
        if taken is None:
            return None
        epoch, old_member, gap = taken
        if epoch == 1:
            log.info(
                "router group %s: %s leads with epoch 1 (first leader)", self.group, self.member
            )
        else:
            log.info(
                "router group %s: %s leads with epoch %d, taking over from %r; "
                "the group had no leader for %.3f s",
                self.group,
                self.member,
                epoch,
                old_member,
                gap or 0.0,
            )
        return epoch

    def _claim(self, conn: psycopg.Connection[Any]) -> tuple[int, str | None, float | None] | None:
        """In one transaction: (new epoch, old member, seconds without a leader), or None."""
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(_q(_CLAIM, self.group))
            row = cur.fetchone()
            if row is None:
                cur.execute(_q(_INSERT, self.group), (self.member, self.lease_seconds))
                inserted = cur.fetchone()
                # Nothing inserted: another member created the row at the same time.
                return None if inserted is None else (int(inserted[0]), None, None)
            _epoch, old_member, expired, gone = row
            if not (expired or gone):
                return None
            cur.execute(_q(_TAKE, self.group), (self.member, self.lease_seconds))
            taken = cur.fetchone()
            assert taken is not None  # the row is locked by us
            return int(taken[0]), str(old_member), taken[1]

    def info(self) -> LeaderInfo | None:
        """The group's lease row now, or None (no leader yet, or PostgreSQL unreachable)."""
        row = self._attempt(lambda conn: conn.execute(_q(_INFO, self.group)).fetchone())
        if row is None:
            return None
        return LeaderInfo(
            group=self.group,
            epoch=int(row[0]),
            member=row[1],
            pid=row[2],
            since=row[3],
            renewed=row[4],
            expires=row[5],
            failovers=int(row[6]),
            last_failover=row[7],
            last_failover_seconds=row[8],
        )

    def release(self, epoch: int) -> None:
        """Give up the lease of ``epoch`` now (if it is still ours): a clean stop.

        A standby then leads at its next poll. Never raises; on trouble the lease
        simply runs out.
        """
        if self._attempt(lambda conn: self._release(conn, epoch)):
            log.info("router group %s: %s released epoch %d", self.group, self.member, epoch)

    def _release(self, conn: psycopg.Connection[Any], epoch: int) -> bool:
        with conn.transaction():
            return conn.execute(_q(_RELEASE, self.group), (epoch,)).rowcount == 1

    def _attempt(self, work: Callable[[psycopg.Connection[Any]], _T]) -> _T | None:
        """``work(connection)``, or None when there is no connection, the lease row is
        locked (a leader is renewing it: not now) or PostgreSQL failed (logged)."""
        conn = self._connection()
        if conn is None:
            return None
        try:
            result = work(conn)
        except psycopg.errors.LockNotAvailable:
            return None
        except psycopg.Error as exc:
            self._failed(exc)
            return None
        self._ok()
        return result

    def close(self) -> None:
        """Close the connection (if we lead, a standby may then take over at once)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _connection(self) -> psycopg.Connection[Any] | None:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        self._conn = None
        try:
            conn = psycopg.connect(self._conninfo, autocommit=True)
        except psycopg.Error as exc:
            self._failed(exc)
            return None
        try:
            # lock_timeout bounds our waits for a lock (the first INSERT, release). The
            # idle timeout ends our transaction should this process be paused inside one
            # (SIGSTOP in try_lead): its row lock would stop the leader's fence for good.
            ms = str(max(100, int(self.lease_seconds * 1000)))
            conn.execute(
                "SELECT set_config('lock_timeout', %s, false),"
                " set_config('idle_in_transaction_session_timeout', %s, false)",
                (ms, ms),
            )
            with conn.cursor() as cur:
                ensure_lease_table(cur, self.group)
        except psycopg.Error as exc:
            conn.close()
            self._failed(exc)
            return None
        self._conn = conn
        return conn

    def _failed(self, exc: psycopg.Error) -> None:
        """Log trouble once (a reminder every REMIND_SECONDS); drop a broken connection."""
        conn = self._conn
        if conn is not None and (
            conn.broken
            or conn.closed
            # Someone dropped our schema: connect again, which creates it again.
            or isinstance(exc, psycopg.errors.UndefinedTable | psycopg.errors.InvalidSchemaName)
        ):
            self.close()
        what = f"{type(exc).__name__}: {str(exc).strip()}"
        now = time.monotonic()
        if self._trouble is not None and now - self._trouble_logged < REMIND_SECONDS:
            self._trouble = what
            return
        again = " (still)" if self._trouble is not None else ""
        self._trouble, self._trouble_logged = what, now
        log.warning(
            "router group %s: PostgreSQL at %s%s: %s; standing by, trying again every poll",
            self.group,
            self.where,
            again,
            what,
        )

    def _ok(self) -> None:
        if self._trouble is not None:
            log.info("router group %s: PostgreSQL at %s answers again", self.group, self.where)
            self._trouble = None
