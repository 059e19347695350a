"""Journal write failures and what the router releases: a failure-injection model test.

A real router (its loop driven step by step in this thread, real sockets, a
journal file) takes REQUESTs from a client and hands jobs to a job manager
that finishes them. Its journal's connection is wrapped so that one chosen
write or COMMIT fails the way SQLite fails it: ``SQLITE_BUSY`` (that
statement not applied, the transaction kept), ``SQLITE_FULL`` or
``SQLITE_IOERR`` (the whole transaction rolled back). Every write and commit
point of the run is tried, with each kind, once and for several points in a
row. After every loop iteration a second connection (what a restarted
router would read: committed writes only) must hold every job the client
got an ACK for, unless the job manager finished it (then its msgid is kept as
finished). A job goes to the job manager while its commit is in flight: one
the journal does not hold yet must not have been ACKed, and once the faults
are over every job handed out is held or kept as finished (its outcome written
with it). Should the router's loop raise, it is closed as ``Router.run`` would
close it, and the same must hold.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from pathlib import Path
from typing import Any, TypeVar

import pytest
import zmq

from django_eventmq.protocol import new_msgid
from django_eventmq.protocol.batch import pack_jobs, unpack_jobs
from django_eventmq.router.journal import commit as journal_module
from django_eventmq.router.journal.commit import JournalBase
from django_eventmq.router.journal.schedules import unpack_frames
from django_eventmq.router.journal.schema import INSERT_CHUNK, INSERT_JOB, INSERT_JOBS
from django_eventmq.router.journal.store import Journal, JournalUnavailable
from django_eventmq.router.router import Router
from tests.router.test_journal import add
from tests.router.test_router import JOB, Peer, make_settings
from tests.router.test_stored_msgids_outage import answer, spilled_router
from tests.support import wait_for

#: REQUESTs the client sends in each of the first steps, and the steps with faults.
PER_STEP = 3
SENDING_STEPS = 6
STEPS = 14
KINDS = {
    "busy": ("SQLITE_BUSY", "database is locked", False),
    "full": ("SQLITE_FULL", "database or disk is full", True),
    "ioerr": ("SQLITE_IOERR_WRITE", "disk I/O error", True),
}
_WRITES = ("INSERT", "UPDATE", "DELETE", "COMMIT")
V = b"eMQP/1.0"
BODY = JOB.encode()


class FaultyDB:
    """A SQLite connection whose write and COMMIT statements are counted ("points");
    the points in ``plan`` fail with their kind, before the statement runs."""

    def __init__(self, real: sqlite3.Connection, plan: dict[int, str]) -> None:
        self.real = real
        self.plan = plan
        self.points = 0
        #: The first word of each write counted (INSERT, DELETE, COMMIT, ...).
        self.seen: set[str] = set()
        #: Every write statement counted, whole.
        self.statements: set[str] = set()

    def _point(self, sql: str) -> None:
        if not sql.lstrip().upper().startswith(_WRITES):
            return
        self.points += 1
        self.seen.add(sql.split(None, 1)[0].upper())
        self.statements.add(sql)
        kind = self.plan.get(self.points)
        if kind is None:
            return
        name, text, rolls_back = KINDS[kind]
        if rolls_back and self.real.in_transaction:
            self.real.execute("ROLLBACK")  # what SQLite does on these errors
        exc = sqlite3.OperationalError(text)
        exc.sqlite_errorname = name  # type: ignore[attr-defined]
        raise exc

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        self._point(sql)
        return self.real.execute(sql, params)

    def executemany(self, sql: str, params: Any) -> sqlite3.Cursor:
        self._point(sql)
        return self.real.executemany(sql, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


Faulty = TypeVar("Faulty", bound=FaultyDB)


def install(journal: JournalBase, faulty: Faulty) -> Faulty:
    """Make ``journal`` write through ``faulty`` (wrapping its connection)."""
    journal.db = faulty  # type: ignore[assignment]
    journal._execute = faulty.execute  # type: ignore[method-assign]
    return faulty


@pytest.fixture(autouse=True)
def _retry_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each loop iteration retries a failed commit (the router waits a second).
    monkeypatch.setattr(journal_module, "RETRY_INTERVAL", 0.0, raising=False)


def restart_view(path: Path) -> tuple[set[str], set[str]]:
    """The msgids a restarted router would hold, and those it knows finished."""
    reader = sqlite3.connect(path)
    try:
        jobs = {m for (m,) in reader.execute("SELECT msgid FROM jobs")}
        for count, frame in reader.execute("SELECT count, jobs FROM parcels"):
            jobs.update(
                job[0].decode() for job in unpack_jobs(frame, max_jobs=count, max_bytes=len(frame))
            )
        finished = {m for (m,) in reader.execute("SELECT msgid FROM finished")}
    finally:
        reader.close()
    return jobs, finished


def run(
    ctx: zmq.Context[Any],
    path: Path,
    plan: dict[int, str],
    *,
    on_disk: bool = False,
    seen: set[str] | None = None,
    per_step: int = PER_STEP,
    statements: set[str] | None = None,
) -> int:
    """One run with the faults of ``plan``; asserts the invariant after each step and,
    once the faults are over, that every message got its answer (the client sends
    an unanswered one again, as ours does). Returns the points; ``seen`` gets the
    first word of every write counted.

    ``on_disk``: a queue window of 2, so most jobs wait on disk only (each new one
    is inserted at once, queues are loaded from disk) and the client also sends
    BATCHes, stored whole (parcels) and opened later. ``per_step``: REQUESTs sent
    in each sending step; ``statements`` gets every write statement counted."""
    for suffix in ("", "-wal", "-shm", ".mark", ".lock"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)
    window = {"queue_window": 2} if on_disk else {}
    # Written twice (a replay, then the kept writes again) shows as this error.
    twice = _Said("not stored: msgid already held")
    logging.getLogger("django_eventmq.router").addHandler(twice)
    router = Router(make_settings(journal=True, journal_path=str(path), poison_after=100, **window))
    router.start()
    journal = router.book.journal
    faulty = install(journal, FaultyDB(journal.db, plan))
    client = Peer(ctx, router.frontend_address, b"client")
    worker = Peer(ctx, router.backend_address, b"worker")
    acked: set[str] = set()  # jobs an ACK covered
    answered: set[str] = set()  # messages (REQUEST, BATCH) answered
    rejected: set[str] = set()
    handed: set[str] = set()
    finished: set[str] = set()
    #: msgid -> the message's frames and the jobs it carries.
    sent: dict[str, tuple[list[bytes], list[str]]] = {}
    later: list[str] = []  # jobs the worker finishes one step later
    stored: set[str] = set()  # jobs a restarted router has seen in the journal
    crashed: Exception | None = None

    def send(frames: list[bytes], jobs: list[str]) -> None:
        sent[frames[3].decode()] = (frames, jobs)
        client.send_raw(frames)

    worker.send("INFORM", "default", "worker")
    try:
        for step in range(STEPS + 400):
            if step < (SENDING_STEPS // 2 if on_disk else SENDING_STEPS):
                for _ in range(per_step):
                    msgid = new_msgid()
                    request = [b"", V, b"REQUEST", msgid.encode(), b"default", b"guarantee", BODY]
                    send(request, [msgid])
                if on_disk:
                    jobs = [new_msgid() for _ in range(4)]
                    packed = pack_jobs((m.encode(), b"default", b"guarantee", BODY) for m in jobs)
                    send([b"", V, b"BATCH", new_msgid().encode(), packed], jobs)
            elif step % 10 == 0:
                for msgid in sent.keys() - answered:
                    client.send_raw(sent[msgid][0])
            if step == 1:
                for _ in range(2):
                    worker.send("READY")
            for msgid in later:
                worker.send("DONE", msgid, "ok", "{}")
                finished.add(msgid)
            later = []
            try:
                router.loop_once(timeout_ms=1)
            except Exception as exc:
                router.close()  # as Router.run does when its loop raises
                crashed = exc
            while client.pending():
                frames = client.recv_raw()
                msgid = frames[4].decode()
                if frames[2] == b"REJECT":
                    rejected.add(msgid)
                    answered.add(msgid)  # a REQUEST's; a BATCH's job is not a message
                elif frames[2] == b"ACK":
                    answered.add(msgid)
                    acked.update(job for job in sent[msgid][1] if job not in rejected)
            while worker.pending():
                frames = worker.recv_raw()
                if frames[2] == b"REQUEST":
                    msgid = frames[3].decode()
                    handed.add(msgid)
                    if len(handed) % 2:
                        worker.send("DONE", msgid, "ok", "{}")
                        finished.add(msgid)
                    else:
                        later.append(msgid)
            jobs, done = restart_view(path)
            lost = sorted(m for m in acked - finished if m not in jobs and m not in done)
            assert not lost, f"step {step}, plan {plan}: acknowledged but not stored: {lost}"
            # A stored job leaves the journal only with its msgid remembered as finished
            # (the same commit): else a restarted router would run a resend of it again.
            stored |= jobs
            forgotten = sorted(m for m in stored - jobs if m not in done)
            assert not forgotten, f"step {step}, plan {plan}: removed, not remembered: {forgotten}"
            if crashed:  # what it released was stored, but it must not stop
                pytest.fail(f"plan {plan}: the router's loop raised {crashed!r}")
            if step >= STEPS and answered >= sent.keys() and not journal.pending:
                break  # the faults are over: the journal wrote what it kept
        assert answered >= sent.keys(), f"plan {plan}: never answered: {sent.keys() - answered}"
        assert journal.failure is None
        # Handed out while its commit was in flight: written since, as a job or, if the
        # job manager finished it meanwhile, as a finished msgid (a resend is refused).
        jobs, done = restart_view(path)
        unwritten = sorted(m for m in handed if m not in jobs and m not in done)
        assert not unwritten, f"plan {plan}: handed out, never written: {unwritten}"
        if seen is not None:
            seen.update(faulty.seen)
        if statements is not None:
            statements.update(faulty.statements)
        assert not twice.said, f"plan {plan}: {twice.said}"
        return faulty.points
    finally:
        logging.getLogger("django_eventmq.router").removeHandler(twice)
        client.close()
        worker.close()
        router.close()


class _Said(logging.Handler):
    """Keeps the messages logged that contain ``text``."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.DEBUG)
        self.text = text
        self.said: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if self.text in message:
            self.said.append(message)


def every_point(zctx: zmq.Context[Any], path: Path, points: int, **options: Any) -> None:
    """:func:`run` with each of ``points`` failing, one kind in turn; every other one
    failing for a while (the next three too, with another kind)."""
    kinds = sorted(KINDS)
    for first in range(1, points + 1):
        run(zctx, path, {first: kinds[first % 3]}, **options)
        if first % 2:
            lasting = dict.fromkeys(range(first, first + 4), kinds[(first + 1) % 3])
            run(zctx, path, lasting, **options)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_no_ack_or_hand_out_leaves_for_a_job_the_journal_does_not_hold(
    zctx: zmq.Context[Any], tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "journal.sqlite3"
    seen: set[str] = set()
    points = run(zctx, path, {}, seen=seen)
    # Not a vacuous run: it stores jobs, deletes finished ones and commits. (How many
    # points it has depends on how the messages fall into the router's turns.)
    assert {"INSERT", "DELETE", "COMMIT"} <= seen, seen
    for first in range(1, points + 1):
        run(zctx, path, {first: kind})
        if first % 2:
            # The same fault for a while: the retries (a replay, then the kept writes) fail too.
            run(zctx, path, dict.fromkeys(range(first, first + 4), kind))


def test_the_same_with_jobs_on_disk_and_batches_stored_whole(
    zctx: zmq.Context[Any], tmp_path: Path
) -> None:
    """Writes made at once (a new job while others wait on disk only, a parcel, a
    parcel opened) and reads from disk, each point with one kind in turn."""
    path = tmp_path / "journal.sqlite3"
    seen: set[str] = set()
    points = run(zctx, path, {}, on_disk=True, seen=seen)
    # Jobs waiting on disk are handed out: their rows are updated (LEASED) too.
    assert {"INSERT", "DELETE", "UPDATE", "COMMIT"} <= seen, seen
    every_point(zctx, path, points, on_disk=True)


def test_the_same_with_many_jobs_a_turn_stored_by_the_row_chunked_insert(
    zctx: zmq.Context[Any], tmp_path: Path
) -> None:
    """More new jobs in a transaction than one chunked INSERT takes: the chunks and
    the rest (one statement each kind) stand or fall together, each point failing
    with one kind in turn."""
    path = tmp_path / "journal.sqlite3"
    statements: set[str] = set()
    per_step = INSERT_CHUNK + 6
    points = run(zctx, path, {}, per_step=per_step, statements=statements)
    assert {INSERT_JOBS, INSERT_JOB} <= statements, "no chunked insert and rest in the run"
    every_point(zctx, path, points, per_step=per_step)


def test_a_job_held_back_by_a_failing_journal_keeps_its_lease_until_it_is_sent(
    zctx: zmq.Context[Any], tmp_path: Path
) -> None:
    """A job handed out but not sent (its commit failed before a job manager was
    ready for it) is not running: its lease must not run out meanwhile, or it would
    count deaths and end up poisoned. (A job handed out in the turn that accepted
    it goes out while its commit is in flight, before a failure is known.)"""
    router = Router(
        make_settings(journal=True, journal_path=str(tmp_path / "j.sqlite3"), lease_grace=1.0)
    )
    router.start()
    journal = router.book.journal
    faulty = install(journal, FaultyDB(journal.db, {}))
    client = Peer(zctx, router.frontend_address, b"client")
    worker = Peer(zctx, router.backend_address, b"worker")
    try:
        worker.send("INFORM", "default", "worker")
        router.loop_once(timeout_ms=200)
        router.loop_once(timeout_ms=200)
        assert router.routing.workers
        faulty.plan = dict.fromkeys(range(faulty.points + 1, faulty.points + 10_000), "busy")
        msgid = client.send("REQUEST", "default", "guarantee,timeout:2", JOB)

        def failing() -> bool:
            router.loop_once(timeout_ms=50)
            return journal.failure is not None

        wait_for(failing, what="the journal to fail")
        assert msgid in router.routing.inflight or router.book.backlog()
        worker.send("READY")  # now it is handed out, and held back
        now = time.monotonic()
        for step in range(11):  # 50 s: its lease (2 s + 1 s grace) would run out many times
            router.loop_once(timeout_ms=50, now=now + 5 * step)
        assert journal.failure is not None
        job = router.routing.inflight[msgid]
        assert job.deaths == 0 and not router.book.poisoned.by_queue
        faulty.plan = {}
        sent_after = time.monotonic()
        sent: list[bytes] = []

        def handed_out() -> bool:
            router.loop_once(timeout_ms=50, now=now + 55)
            while worker.pending():
                frames = worker.recv_raw()
                if frames[2] == b"REQUEST":
                    sent.append(frames[3])
            return bool(sent)

        wait_for(handed_out, what="the job to go out once stored")
        assert sent == [msgid.encode()]
        # Its lease (2 s + 1 s grace) starts when it is sent, not when it was handed out.
        assert job.deaths == 0 and job.lease_until >= sent_after + 3
    finally:
        client.close()
        worker.close()
        router.close()


def test_a_write_failing_with_nothing_kept_is_retried_and_clears_the_failure(
    tmp_path: Path,
) -> None:
    """A write made at once (a new job while others wait on disk only) can be the
    first write after a commit: it fails with nothing kept. The journal must still
    try again and say it can be written once it can, not refuse new jobs for ever
    on a router that has nothing else to write."""
    path = tmp_path / "journal.sqlite3"
    journal = Journal(str(path), busy_timeout=0.01)
    other = sqlite3.connect(path)
    try:
        other.execute("BEGIN IMMEDIATE")  # another connection holds the write lock
        with pytest.raises(JournalUnavailable):
            add(journal, 1, on_disk=True)
        assert journal.failure is not None and not journal.pending
        other.rollback()
        assert journal.commit()  # the retry finds the lock released
        assert journal.failure is None
        assert add(journal, 1, on_disk=True) and journal.commit()
    finally:
        other.close()
        journal.close()


def test_an_idle_router_whose_insert_failed_takes_new_jobs_again_once_it_can(
    zctx: zmq.Context[Any], tmp_path: Path
) -> None:
    """With jobs waiting on disk only, a new job is inserted at once. Its insert
    failing (the lock held elsewhere) with nothing else to write must not leave
    the router refusing new jobs after the lock is released."""
    with spilled_router(zctx, tmp_path / "journal.sqlite3") as (router, client, other):
        other.execute("BEGIN IMMEDIATE")
        router.book.stored_msgids.full = True  # any msgid may be stored: inserted at once
        msgid = client.send("REQUEST", "default", "guarantee", JOB)
        assert answer(router, client, msgid) == "REJECT"
        assert not router.book.journal.pending
        other.rollback()

        def writable() -> bool:
            router.loop_once(timeout_ms=10)
            return router.book.journal.failure is None

        wait_for(writable, what="the journal to be found writable again")
        msgid = client.send("REQUEST", "default", "guarantee", JOB)
        assert answer(router, client, msgid) == "ACK"


class FullAtCommit(FaultyDB):
    """While ``full``, every COMMIT fails with SQLITE_FULL and the writes before it
    succeed, as on a full disk (a transaction's writes stay in SQLite's cache)."""

    full = False

    def _point(self, sql: str) -> None:
        if self.full and sql.lstrip().upper().startswith("COMMIT"):
            self.plan = {self.points + 1: "full"}
        super()._point(sql)


def test_a_long_outage_keeps_the_replayed_writes_bounded(tmp_path: Path) -> None:
    """While every COMMIT fails, a job changed again and again is one kept change;
    the writes replayed at each retry must not pile up a copy of every change
    since the outage began (memory, and a replay growing longer at each retry)."""
    journal = Journal(str(tmp_path / "journal.sqlite3"))
    faulty = install(journal, FullAtCommit(journal.db, {}))
    try:
        for seq in range(1, 4):
            add(journal, seq)
        assert journal.commit()
        faulty.full = True
        replayed = []
        for attempt in range(50):
            journal.set_state(1 + attempt % 3, attempt % 2)
            assert not journal.commit()
            replayed.append(len(journal._log))
        assert journal.failure is not None
        assert max(replayed) <= 2, replayed
        faulty.full = False
        assert journal.commit() and journal.failure is None
        states = dict(journal.db.execute("SELECT seq, state FROM jobs").fetchall())
        assert states == {1: 0, 2: 1, 3: 1}  # the last state of each (attempts 48, 49, 47)
    finally:
        journal.close()


def test_a_job_stored_on_disk_only_sent_again_during_an_outage_is_not_refused(
    zctx: zmq.Context[Any], tmp_path: Path
) -> None:
    """A job waiting on disk only (past the queue's window) is stored: sent again
    while the journal cannot be written, it is a duplicate, not a REJECT (its
    sender would take it for refused and maybe send it anew under a new msgid)."""
    router = Router(
        make_settings(
            journal=True,
            journal_path=str(tmp_path / "journal.sqlite3"),
            queue_window=1,
            journal_busy_timeout=0.01,
            hwm_policy="reject",
        )
    )
    router.start()
    client = Peer(zctx, router.frontend_address, b"client")
    other = sqlite3.connect(tmp_path / "journal.sqlite3")
    try:
        sent = []
        for _ in range(3):  # no worker: the first waits in memory, the others on disk only
            sent.append(client.send("REQUEST", "default", "guarantee", JOB))
            assert answer(router, client, sent[-1]) == "ACK"
        other.execute("BEGIN IMMEDIATE")
        router.book.stored_msgids.full = True  # any msgid may be stored: inserted at once
        new = client.send("REQUEST", "default", "guarantee", JOB)
        assert answer(router, client, new) == "REJECT"  # the journal found unwritable
        assert router.book.journal.failure is not None
        client.send("REQUEST", "default", "guarantee", JOB, msgid=sent[-1])
        assert answer(router, client, sent[-1]) == "ACK"
    finally:
        other.rollback()
        other.close()
        client.close()
        router.close()


def one_job_stored(path: Path, faulty: type[Faulty]) -> tuple[Journal, Faulty]:
    """A journal remembering finished msgids, job m1 committed, then writing through
    a ``faulty`` connection (no fault planned yet)."""
    journal = Journal(str(path))
    journal.keep_finished(100, 3600.0)
    add(journal, 1)
    assert journal.commit()
    return journal, install(journal, faulty(journal.db, {}))


def test_a_finished_jobs_removal_is_never_committed_without_its_msgid(tmp_path: Path) -> None:
    """A DONE deletes the job's row and remembers its msgid as finished, in the same
    commit (docs/durability.md, "Duplicates"). The writes a failed transaction had
    applied are replayed and committed alone first: the delete must not be among
    them without the finished row, or a crash after that commit would let a
    resend of the finished job run again."""
    path = tmp_path / "journal.sqlite3"
    journal, faulty = one_job_stored(path, FaultyDB)
    try:
        journal.delete(1)
        journal.add_finished("m1", time.time())
        # The finished row's INSERT fails (the transaction rolled back, the DELETE
        # before it logged for the replay); then each retry fails one write later:
        # the replay, its COMMIT, the kept writes, the last COMMIT.
        faulty.plan = {2: "ioerr"}
        assert not journal.commit()
        for later in range(1, 8):
            faulty.plan = {faulty.points + later: "ioerr"}
            journal.commit()
            jobs, done = restart_view(path)
            assert "m1" in jobs or "m1" in done, "the job was removed, its msgid not remembered"
        faulty.plan = {}
        journal.commit()  # if a retry above has not stored it all yet
        assert journal.failure is None and not journal.pending
        assert restart_view(path) == (set(), {"m1"})
    finally:
        journal.close()


class ReadFails(FaultyDB):
    """While ``failing``, the next SELECT fails with SQLITE_IOERR and, as SQLite does
    for that error, ends the open transaction (rolled back)."""

    failing = False

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        if self.failing and sql.lstrip().upper().startswith("SELECT"):
            self.failing = False
            if self.real.in_transaction:
                self.real.execute("ROLLBACK")
            exc = sqlite3.OperationalError("disk I/O error")
            exc.sqlite_errorname = "SQLITE_IOERR_READ"  # type: ignore[attr-defined]
            raise exc
        return super().execute(sql, params)


def test_a_read_that_ends_the_transaction_is_a_failure_and_its_writes_come_back(
    tmp_path: Path,
) -> None:
    """A read failing with an I/O error ends SQLite's open transaction (rolled back),
    writes already applied in it included. The journal must take that as a failed
    write: say so, write nothing more outside a transaction (each statement would
    commit on its own, a DELETE without its finished msgid among them), and
    replay what was lost once it can, not fail for ever on its own replay."""
    path = tmp_path / "journal.sqlite3"
    journal, faulty = one_job_stored(path, ReadFails)
    try:
        add(journal, 2)
        faulty.failing = True
        with pytest.raises(JournalUnavailable):
            journal.waiting("default", None, 10)  # row 2 applied, then lost with the read
        assert journal.failure is not None
        add(journal, 3)
        journal.delete(1)
        journal.add_finished("m1", time.time())
        # Nothing reaches the file outside a transaction meanwhile.
        assert restart_view(path) == ({"m1"}, set())
        for _ in range(3):  # the retries (no wait between them here)
            if journal.commit():
                break
        assert journal.failure is None and not journal.pending
        assert restart_view(path) == ({"m2", "m3"}, {"m1"})
    finally:
        journal.close()


def test_a_cancelled_jobs_answer_waits_for_the_commit_that_drops_it(
    zctx: zmq.Context[Any], tmp_path: Path
) -> None:
    """CANCEL drops a queued job, and its client is told "cancelled" (it never runs):
    told only once the journal holds the drop, or a router killed before that
    commit would run the job after its restart."""
    path = tmp_path / "journal.sqlite3"
    router = Router(make_settings(journal=True, journal_path=str(path)))
    router.start()
    client = Peer(zctx, router.frontend_address, b"client")
    try:
        msgid = client.send("REQUEST", "default", "reply-requested,guarantee", JOB)
        assert answer(router, client, msgid) == "ACK"
        faulty = install(router.book.journal, FullAtCommit(router.book.journal.db, {}))
        faulty.full = True
        client.send("CANCEL", msgid)
        wait_for(lambda: router.loop_once(timeout_ms=1) or faulty.points > 0, what="a commit")
        for _ in range(5):
            router.loop_once(timeout_ms=1)
        assert not client.pending(), "told cancelled before the journal held it"
        assert msgid in restart_view(path)[0]
        faulty.full = False

        def told() -> bool:
            router.loop_once(timeout_ms=10)
            return client.pending()

        wait_for(told, what="the cancelled job's answer")
        frames = client.recv_raw()
        # REPLY: its own msgid, the payload, the job's msgid (reply_to).
        assert frames[2] == b"REPLY" and frames[5].decode() == msgid
        assert b"cancelled before it ran" in frames[4]
        assert msgid not in restart_view(path)[0]
    finally:
        client.close()
        router.close()


def kept_schedules(path: Path) -> list[tuple[str, str]]:
    """The SCHEDULE/UNSCHEDULE messages committed in the journal: (command, msgid)."""
    reader = sqlite3.connect(path)
    try:
        rows = reader.execute("SELECT frames FROM schedules ORDER BY seq").fetchall()
    finally:
        reader.close()
    return [(f[2].decode(), f[3].decode()) for f in (unpack_frames(row[0]) for row in rows)]


def test_an_unschedule_and_the_kept_schedules_it_drops_are_committed_together(
    zctx: zmq.Context[Any], tmp_path: Path
) -> None:
    """With no scheduler connected, an UNSCHEDULE drops the kept SCHEDULEs of its job
    and is kept itself. Its INSERT failing must not leave the drop to be committed
    alone by the replay: the schedulers would never hear of the UNSCHEDULE."""
    path = tmp_path / "journal.sqlite3"
    router = Router(make_settings(journal=True, journal_path=str(path)))
    router.start()
    client = Peer(zctx, router.frontend_address, b"client")
    schedule = [b"", V, b"SCHEDULE", b"id-s", b"q", b"", b"60", BODY, b""]
    unschedule = [b"", V, b"UNSCHEDULE", b"id-u", b"q", b"", BODY]
    try:
        client.send_raw(schedule)
        assert answer(router, client, "id-s") == "ACK"
        faulty = install(router.book.journal, FaultyDB(router.book.journal.db, {}))
        faulty.plan = {2: "full"}  # the UNSCHEDULE's INSERT, after the DELETE
        client.send_raw(unschedule)

        def recovered() -> bool:  # the failure, then the retries; the same after each
            router.loop_once(timeout_ms=1)
            kept = kept_schedules(path)
            assert kept in ([("SCHEDULE", "id-s")], [("UNSCHEDULE", "id-u")]), kept
            return faulty.points > 2 and router.book.journal.failure is None

        wait_for(recovered, what="the journal written again")
        client.send_raw(unschedule)  # unanswered: the client sends it again
        while client.pending():
            client.recv_raw()
        assert answer(router, client, "id-u") == "ACK"
        assert kept_schedules(path) == [("UNSCHEDULE", "id-u")]
    finally:
        client.close()
        router.close()


def test_a_job_in_the_failed_transaction_is_still_held_for_its_resend(tmp_path: Path) -> None:
    """While the journal cannot be written, a resend of a job stored on disk only is a
    duplicate (acknowledged once the journal is written), not refused. A job whose
    row the failed transaction had written (rolled back, kept for the replay) is
    such a job too: neither kept nor committed, it must still be found."""
    path = tmp_path / "journal.sqlite3"
    journal, faulty = one_job_stored(path, FaultyDB)
    try:
        add(journal, 2)
        add(journal, 3)
        faulty.plan = {faulty.points + 2: "full"}  # the COMMIT, after the rows' INSERT
        assert not journal.commit()
        assert journal.failure is not None
        assert all(journal.holds_row(m) for m in ("m1", "m2", "m3"))
        assert not journal.holds_row("m4")
    finally:
        journal.close()
