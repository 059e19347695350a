"""The journal's tables: their SQL, the job states, a new job's values and the
rows read back, and the steps that bring an older journal file up to date."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Protocol


class JobState(IntEnum):
    """A job row's ``state`` column (the numbers are on disk: never renumber)."""

    #: Stored, waiting for a worker (or for its queue's turn in memory).
    WAITING = 0
    #: Handed out to a worker, not reported finished (WAITING again after a restart).
    LEASED = 1
    #: Its worker died ``POISON_AFTER`` times running it: set aside, never handed out.
    POISONED = 2
    #: Not to run before ``due`` (delay-until header, retry back-off).
    DELAYED = 3

    @property
    def sql(self) -> str:
        """The state as an SQL literal, put in statements once, at import: a
        query names the same constant as the partial index (``jobs_waiting``,
        ...) it should use, as the statements always did."""
        return str(int(self))


def known_state(number: int) -> JobState | None:
    """The :class:`JobState` stored as ``number``; None for a number this release
    does not know (a newer release's journal, a hand edit): such a row is left
    alone, never a reason to stop."""
    try:
        return JobState(number)
    except ValueError:
        return None


# The names the router imports (members, so they compare and hash as the ints).
WAITING = JobState.WAITING
LEASED = JobState.LEASED
POISONED = JobState.POISONED
DELAYED = JobState.DELAYED

#: In-memory journal (``JOURNAL=False``): the same store, nothing on disk.
MEMORY = ":memory:"

SCHEMA = f"""
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
CREATE INDEX IF NOT EXISTS jobs_waiting ON jobs (queue, nprio, seq) WHERE state = {WAITING.sql};
CREATE INDEX IF NOT EXISTS jobs_delayed ON jobs (due) WHERE state = {DELAYED.sql};
CREATE INDEX IF NOT EXISTS jobs_poisoned ON jobs (seq) WHERE state = {POISONED.sql};
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
"""  # noqa: S608 - only JobState numbers are put in


INSERT_JOB = (
    "INSERT OR IGNORE INTO jobs (seq, msgid, queue, nprio, state, due, guarantee, headers,"
    " body, client, accepted, deaths, attempts, reason, owner)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


#: New rows per statement of :data:`INSERT_JOBS` (15 values each: 960 variables,
#: under the 999 of SQLite builds before 3.32).
INSERT_CHUNK = 64
#: :data:`INSERT_JOB` for :data:`INSERT_CHUNK` rows at once: one statement step
#: stores them all (~1.4 us a job less than a step per row, 20,000 rows).
INSERT_JOBS = INSERT_JOB + ("," + INSERT_JOB[INSERT_JOB.rindex(" (") :]) * (INSERT_CHUNK - 1)


class NewJob(Protocol):
    """What the journal reads of a new job, by name (the router's
    :class:`~django_eventmq.router.waiting.RoutedJob`)."""

    seq: int
    msgid: str
    queue: str
    priority: int
    guarantee: bool
    client: bytes

    @property
    def header_frame(self) -> bytes: ...

    @property
    def body(self) -> bytes: ...


def job_values(
    job: NewJob, state: int, accepted: float, due: float = 0.0, owner: str | None = None
) -> list[Any]:
    """A new job's values for :meth:`Journal.add` (in ``INSERT_JOB``'s order), read
    from the job by name; ``owner``: the CURVE key that sent it (CANCEL_POLICY
    ``owner``)."""
    return [
        job.seq,
        job.msgid,
        job.queue,
        -job.priority,
        state,
        due,
        job.guarantee,
        job.header_frame,
        job.body,
        job.client,
        accepted,
        0,
        0,
        "",
        owner,
    ]


def new_row(
    *,
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
    """A new job's values for :meth:`Journal.add` (in ``INSERT_JOB``'s order) from
    its fields named one by one (a parcel's job, tests)."""
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


@dataclass(slots=True)
class Parcel:
    """A BATCH stored as one row (:mod:`.parcels`): ``count`` jobs of ``queue``
    with the same ``headers``, their JOBS frame ``jobs`` as received; they take
    seqs ``seq .. seq + count - 1``."""

    seq: int
    count: int
    queue: str
    priority: int
    guarantee: bool
    headers: bytes
    client: bytes
    accepted: float
    jobs: bytes
    #: :func:`.parcels.parcel_digest` of ``jobs``, if already computed.
    digest: bytes | None = None


INSERT_FINISHED = "INSERT INTO finished (seq, msgid, at) VALUES (?, ?, ?)"

#: Where a column's value sits in a new row's INSERT values.
COLUMN_AT = {"state": 4, "due": 5, "deaths": 11, "attempts": 12, "reason": 13}


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


def to_row(values: tuple[Any, ...]) -> Row:
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


def add_owner_column(db: sqlite3.Connection) -> None:
    """Schema step: a journal made before jobs kept their sender's key gets the column."""
    if "owner" not in {row[1] for row in db.execute("PRAGMA table_info(jobs)")}:
        db.execute("ALTER TABLE jobs ADD COLUMN owner TEXT")
