"""A real router process whose journal cannot be written for a while: its write lock
held by another connection, a full disk (a small tmpfs), immutable files. It
keeps running and sending heartbeats, acknowledges no new job (holds clients
back, or REJECTs with the reason, as HWM_POLICY says), hands out and finishes
what it has stored, says so once in its log and in STATUS / MONITOR, and
recovers by itself. Also: a journal that cannot be opened or written at
start is one clear line, not a traceback; files are created mode 0600.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import subprocess
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from django_eventmq.client.connection import Client
from django_eventmq.errors import BrokerUnavailable
from django_eventmq.protocol import new_msgid
from django_eventmq.router.journal import commit as journal_commit
from django_eventmq.router.journal.commit import WAL_SIZE_LIMIT
from django_eventmq.router.journal.store import Journal
from tests.router.test_crash import RouterProcess, worker
from tests.router.test_journal import add
from tests.router.test_router import JOB, Peer
from tests.support import Proc, python_module, tcp_addr, wait_for
from tests.system.chaos.support import admin_call, body, start_jobmanager

#: Heartbeats often enough that a few of them pass while the journal is blocked.
FAST = {"EMQ_HEARTBEAT_INTERVAL": "0.2", "EMQ_HEARTBEAT_TIMEOUT": "10"}


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., RouterProcess]]:
    made: list[RouterProcess] = []

    def start_in(directory: Path = tmp_path, **env: str) -> RouterProcess:
        made.append(RouterProcess(directory, **{**FAST, **env}))
        return made[-1]

    yield start_in
    for proc in made:
        proc.stop()


@pytest.fixture
def peers(zctx: zmq.Context[Any]) -> Iterator[list[Peer]]:
    """Peers to close before the context is (its ``term()`` waits for them)."""
    made: list[Peer] = []
    yield made
    for peer in made:
        peer.close()


def answers(client: Peer, timeout: float = 20.0) -> dict[str, list[str]]:
    """Every ACK and REJECT the client has been sent (by job msgid), waiting up to
    ``timeout`` for the first."""
    found: dict[str, list[str]] = {}
    if client.sock.poll(int(timeout * 1000)):
        while client.pending():
            frames = [f.decode() for f in client.recv_raw()]
            if frames[2] in ("ACK", "REJECT"):
                found[frames[4]] = frames[2:]
    return found


#: Answers read per client and not asked for yet (one read may bring several).
_SEEN: weakref.WeakKeyDictionary[Peer, dict[str, list[str]]] = weakref.WeakKeyDictionary()


def expect_answer(client: Peer, msgid: str, command: str, timeout: float = 20.0) -> list[str]:
    seen = _SEEN.setdefault(client, {})

    def arrived() -> bool:
        seen.update(answers(client, 0.05))
        return msgid in seen

    wait_for(arrived, timeout, f"{command} for {msgid}")
    assert seen[msgid][0] == command, seen[msgid]
    return seen[msgid]


def heartbeats(peer: Peer, count: int) -> list[bytes]:
    """Wait for ``count`` HEARTBEATs on ``peer``; returns the jobs it was sent meanwhile."""
    jobs: list[bytes] = []
    seen = 0
    while seen < count:
        frames = peer.recv_raw(timeout=10)
        if frames[2] == b"HEARTBEAT":
            seen += 1
        elif frames[2] == b"REQUEST":
            jobs.append(frames[3])
    return jobs


def stored(journal: Path) -> set[str]:
    """The msgids a restarted router would hold (committed writes only)."""
    reader = sqlite3.connect(journal)
    try:
        return {m for (m,) in reader.execute("SELECT msgid FROM jobs")}
    finally:
        reader.close()


def test_a_lock_held_by_another_connection_holds_new_jobs_back_until_it_is_released(
    start: Callable[..., RouterProcess], zctx: zmq.Context[Any], peers: list[Peer]
) -> None:
    """HWM_POLICY block (the default). The issue's case: an operator's sqlite3 shell
    holds the write lock for longer than the busy timeout."""
    r = start()
    client = Peer(zctx, r.frontend, b"client")
    peers.append(client)
    first = client.send("REQUEST", "default", "guarantee", JOB)
    expect_answer(client, first, "ACK")
    shell = sqlite3.connect(r.journal, timeout=0, isolation_level=None)
    shell.execute("BEGIN IMMEDIATE")
    try:
        held = client.send("REQUEST", "default", "guarantee", JOB)
        r.proc.wait_output(r"journal .* cannot be written: locked by another connection")
        status = admin_call(r.admin, "STATUS")
        assert status["journal_failure"].startswith("locked by another connection")
        assert admin_call(r.admin, "MONITOR")["blocked"] is True
        later = client.send("REQUEST", "default", "guarantee", JOB)
        # A job manager still gets heartbeats and the stored job, not the held one.
        jm = worker(zctx, r.backend, "jm")
        peers.append(jm)
        jm.send("READY")
        got = heartbeats(jm, 3)
        assert got == [first.encode()]
        jm.send("DONE", first, "ok", "{}")  # finishing goes on too
        assert answers(client, 0.0) == {}  # nothing acknowledged meanwhile
        assert held not in stored(r.journal)
    finally:
        shell.execute("ROLLBACK")
        shell.close()
    expect_answer(client, held, "ACK")
    expect_answer(client, later, "ACK")
    r.proc.wait_output(r"journal .* can be written again")
    assert admin_call(r.admin, "STATUS")["journal_failure"] is None
    assert {held, later} <= stored(r.journal)
    wait_for(lambda: first not in stored(r.journal), what="the finished job to be deleted")
    # One line for the failure, however long it lasted.
    assert r.proc.output().count("cannot be written: locked") == 1
    assert "Traceback" not in r.proc.output()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (root only: skipped without the right to mount)."""
    where = tmp_path / "small"
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(directory: Path) -> Path:
    """Fill the file system of ``directory`` to the last byte; the filler file."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as handle:
        for size in (65536, 4096, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    handle.write(b"\0" * size)
    return filler


def test_a_full_disk_rejects_new_jobs_with_the_reason_and_recovers_when_space_returns(
    start: Callable[..., RouterProcess], zctx: zmq.Context[Any], peers: list[Peer], small_disk: Path
) -> None:
    """HWM_POLICY reject: the client is told why at once."""
    r = start(small_disk, EMQ_HWM_POLICY="reject")
    client = Peer(zctx, r.frontend, b"client")
    peers.append(client)
    first = client.send("REQUEST", "default", "guarantee", JOB)
    expect_answer(client, first, "ACK")
    filler = fill(small_disk)
    big = '["run", {"pad": "' + "x" * 60_000 + '"}]'
    sent: list[str] = []

    def refused() -> list[str] | None:
        sent.append(client.send("REQUEST", "default", "guarantee", big))
        found = answers(client, 0.2)
        return next((a for a in found.values() if a[0] == "REJECT"), None)

    reject = wait_for(refused, 20, "a REJECT once the disk is full", poll=0)
    assert "journal: disk full" in reject[3]
    r.proc.wait_output(r"journal .* cannot be written: disk full")
    assert admin_call(r.admin, "MONITOR")["journal_failure"] == "disk full"
    # What was stored is still handed out.
    jm = worker(zctx, r.backend, "jm")
    peers.append(jm)
    assert first.encode() in heartbeats(jm, 2)

    filler.unlink()
    r.proc.wait_output(r"journal .* can be written again")
    again = client.send("REQUEST", "default", "guarantee", JOB)
    expect_answer(client, again, "ACK")
    assert admin_call(r.admin, "STATUS")["journal_failure"] is None
    assert again in stored(r.journal)
    assert "Traceback" not in r.proc.output()


class GuaranteedSender(threading.Thread):
    """Sends guaranteed jobs one at a time until halted, each again with its msgid
    until it is acknowledged (as a caller of ``.delay()`` that retries would);
    ``acked`` lists the msgids acknowledged."""

    def __init__(self, frontend: str) -> None:
        super().__init__(name="guaranteed-sender")
        self.frontend = frontend
        self.acked: list[str] = []
        self.halt = threading.Event()

    def run(self) -> None:
        client = Client(self.frontend)
        try:
            while not self.halt.is_set():
                msgid = new_msgid()
                while not self.halt.is_set():
                    with contextlib.suppress(BrokerUnavailable):
                        client.send_request_guaranteed(
                            msgid.encode(), b"default", b"guarantee", body(msgid),
                            ack_timeout=1.0, retries=0,
                        )  # fmt: skip
                        self.acked.append(msgid)
                        break
        finally:
            client.close()


@pytest.mark.timeout(300)
def test_a_full_disk_recovers_within_seconds_once_space_returns_and_every_acknowledged_job_runs(
    start: Callable[..., RouterProcess], small_disk: Path, tmp_path: Path
) -> None:
    """Issue 30: the disk filled while a guaranteed sender ran; once the filler was
    removed the journal's WAL (never checkpointed: SQLite waits for 4 MiB of it)
    took all the freed space within some 120 commits, and the router said "disk
    full" for good. Now it recovers once, keeps its files small and every job
    acknowledged runs."""
    r = start(small_disk)
    ran = tmp_path / "ran"
    jm = start_jobmanager(r.backend, 2, EMQ_CHAOS_RECORD=str(ran))
    sender = GuaranteedSender(r.frontend)
    sender.start()
    try:
        wait_for(lambda: len(sender.acked) >= 20, 60, "20 jobs acknowledged")
        filler = fill(small_disk)
        r.proc.wait_output(r"journal .* cannot be written: disk full", timeout=60)
        filler.unlink()
        r.proc.wait_output(r"journal .* can be written again", timeout=30)
        # One job a commit: 500 would fill the 2 MiB again with a WAL never checkpointed.
        target = len(sender.acked) + 500
        wait_for(
            lambda: len(sender.acked) >= target,
            60,
            f"{target} jobs acknowledged, space back (so far {len(sender.acked)})",
        )
    finally:
        sender.halt.set()
        sender.join(30)
    try:

        def runs() -> set[str]:
            return set(ran.read_text().split()) if ran.exists() else set()

        acked = set(sender.acked)
        wait_for(lambda: acked <= runs(), 60, "every acknowledged job to run")
    finally:
        jm.stop()
    out = r.proc.output()
    # One episode: said once when it began and once when it ended, no reminder.
    assert out.count("cannot be written: disk full") == 1, out
    assert out.count("can be written again") == 1, out
    assert "still cannot be written" not in out
    assert admin_call(r.admin, "STATUS")["journal_failure"] is None
    # The WAL is cut back once checkpointed (it had taken the whole disk).
    assert Path(f"{r.journal}-wal").stat().st_size <= WAL_SIZE_LIMIT + (256 << 10)


def test_on_a_full_disk_the_journal_gives_back_its_wal_and_writes_again(
    small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retry on a full disk first copies the WAL into the journal file (into pages
    freed by finished jobs) and cuts it to nothing: the room it held takes the
    write, with the filler still there."""
    monkeypatch.setattr(journal_commit, "RETRY_INTERVAL", 0.0)
    journal = Journal(str(small_disk / "journal.sqlite3"))
    try:
        padded = b'["run", {"pad": "' + b"x" * 3000 + b'"}]'
        # 150 jobs finished: free pages in the journal file, an empty WAL.
        for seq in range(1, 151):
            add(journal, seq, body=padded)
        assert journal.commit()
        for seq in range(1, 151):
            journal.delete(seq)
        assert journal.commit()
        journal.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        # 40 commits of a job: below the checkpoint's pages, all in the WAL.
        for seq in range(151, 191):
            add(journal, seq, body=padded)
            assert journal.commit()
        fill(small_disk)
        seq = 191
        while journal.failure is None:
            add(journal, seq, body=padded)
            journal.commit()
            seq += 1
        assert journal.failure == "disk full"
        assert journal.commit()
        assert journal.failure is None
        assert Path(f"{journal.path}-wal").stat().st_size < 256 << 10
    finally:
        journal.close()
    assert {f"m{n}" for n in range(151, seq)} <= stored(small_disk / "journal.sqlite3")


@pytest.fixture
def immutable(tmp_path: Path) -> Iterator[Callable[[Path], None]]:
    """``chattr +i`` (undone after the test); skipped where the file system has no such
    attribute."""
    made: list[Path] = []
    probe = tmp_path / "probe"
    probe.touch()
    done = subprocess.run(["chattr", "+i", str(probe)], capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"chattr +i does not work here: {done.stderr.decode().strip()}")
    subprocess.run(["chattr", "-i", str(probe)], check=True)

    def set_immutable(path: Path) -> None:
        subprocess.run(["chattr", "+i", str(path)], check=True)
        made.append(path)

    yield set_immutable
    for path in made:
        subprocess.run(["chattr", "-i", str(path)], check=False)


def test_immutable_journal_files_reject_new_jobs_until_made_writable_again(
    start: Callable[..., RouterProcess],
    zctx: zmq.Context[Any],
    peers: list[Peer],
    immutable: Callable[[Path], None],
) -> None:
    """As root, chmod does not stop a write: chattr +i does."""
    r = start(EMQ_HWM_POLICY="reject")
    client = Peer(zctx, r.frontend, b"client")
    peers.append(client)
    first = client.send("REQUEST", "default", "guarantee", JOB)
    expect_answer(client, first, "ACK")
    wal = Path(f"{r.journal}-wal")
    immutable(wal)
    # Its commit is the one that fails: kept in memory, its ACK waits.
    kept = client.send("REQUEST", "default", "guarantee", JOB)
    r.proc.wait_output(r"journal .* cannot be written: not writable")
    refused = client.send("REQUEST", "default", "guarantee", JOB)
    reject = expect_answer(client, refused, "REJECT")
    assert f"not writable (read-only or immutable file or directory): {wal}" in reject[3]
    assert kept not in stored(r.journal)
    subprocess.run(["chattr", "-i", str(wal)], check=True)
    expect_answer(client, kept, "ACK")
    r.proc.wait_output(r"journal .* can be written again")
    again = client.send("REQUEST", "default", "guarantee", JOB)
    expect_answer(client, again, "ACK")
    assert {first, kept, again} <= stored(r.journal)
    assert refused not in stored(r.journal)


def router_on(journal: Path, *extra: str) -> tuple[Proc, str]:
    """A router process on ``journal`` (free addresses) and its admin address."""
    admin = tcp_addr()
    args = ["--frontend", tcp_addr(), "--backend", tcp_addr(), "--admin", admin]
    return Proc(python_module("router", *args, "--journal", str(journal), *extra)), admin


def start_failing(journal: Path) -> Proc:
    """A router process that should refuse to start; returns it once it exited."""
    proc, _admin = router_on(journal)
    proc.popen.wait(30)
    return proc


def one_clear_line(proc: Proc, text: str) -> None:
    out = proc.output()
    proc.stop()
    assert proc.popen.returncode == 1, out
    assert "Traceback" not in out, out
    (line,) = [line for line in out.splitlines() if "error:" in line]
    assert text in line, out


def test_starting_on_a_read_only_path_or_a_full_disk_is_one_clear_line(
    tmp_path: Path, immutable: Callable[[Path], None], small_disk: Path
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    immutable(locked)
    one_clear_line(
        start_failing(locked / "journal.sqlite3"),
        f"cannot write journal {locked / 'journal.sqlite3'}: not writable",
    )
    fill(small_disk)
    one_clear_line(
        start_failing(small_disk / "journal.sqlite3"),
        f"cannot write journal {small_disk / 'journal.sqlite3'}: disk full",
    )


def test_journal_files_are_created_mode_0600(
    start: Callable[..., RouterProcess], zctx: zmq.Context[Any], peers: list[Peer]
) -> None:
    r = start()
    client = Peer(zctx, r.frontend, b"client")
    peers.append(client)
    expect_answer(client, client.send("REQUEST", "default", "guarantee", JOB), "ACK")
    wait_for(lambda: Path(f"{r.journal}.mark").exists(), what="the mark file")
    for suffix in ("", "-wal", "-shm", ".lock", ".mark"):
        mode = stat.S_IMODE(os.stat(f"{r.journal}{suffix}").st_mode)
        assert mode == 0o600, f"{suffix or 'journal'}: {oct(mode)}"


def test_status_names_the_journal_failure(
    start: Callable[..., RouterProcess], zctx: zmq.Context[Any], peers: list[Peer]
) -> None:
    """``emq_status`` says it in its first lines; metrics has emq_journal_writable 0."""
    from django_eventmq.cli import metrics, status

    r = start(EMQ_HWM_POLICY="reject")
    shell = sqlite3.connect(r.journal, timeout=0, isolation_level=None)
    shell.execute("BEGIN IMMEDIATE")
    try:
        client = Peer(zctx, r.frontend, b"client")
        peers.append(client)
        client.send("REQUEST", "default", "guarantee", JOB)
        r.proc.wait_output(r"journal .* cannot be written")
        text = status.render(status.summarize(status.fetch(r.admin, monitor=True)))
        assert "JOURNAL CANNOT BE WRITTEN: locked by another connection" in text
        families = metrics.router_families(status.fetch(r.admin, monitor=True))
        (writable,) = [f for f in families if f.name == "emq_journal_writable"]
        assert writable.samples[0].value == 0
    finally:
        shell.execute("ROLLBACK")
        shell.close()


def test_a_guaranteed_send_returns_only_once_its_job_is_stored(
    start: Callable[..., RouterProcess],
) -> None:
    """The issue's report: with the lock held, a guaranteed send returned after the busy
    timeout and the job was never stored. Now it returns once the job is stored."""
    r = start()
    shell = sqlite3.connect(r.journal, timeout=0, isolation_level=None, check_same_thread=False)
    shell.execute("BEGIN IMMEDIATE")
    released = threading.Event()

    def release_once_refused() -> None:
        r.proc.wait_output(r"journal .* cannot be written: locked")
        released.set()  # before the lock goes: an ACK can only come after this
        shell.execute("ROLLBACK")

    releaser = threading.Thread(target=release_once_refused)
    releaser.start()
    client = Client(r.frontend)
    try:
        msgid = new_msgid()
        client.send_request_guaranteed(
            msgid.encode(), b"default", b"guarantee", JOB.encode(), ack_timeout=5.0, retries=3
        )
        assert released.is_set()
        assert msgid in stored(r.journal)
    finally:
        client.close()
        releaser.join(30)
        shell.close()


def test_a_guaranteed_send_during_a_long_outage_gives_up_and_its_job_is_stored_after(
    start: Callable[..., RouterProcess],
) -> None:
    """HWM_POLICY block: while the journal cannot be written the router reads no
    client, so a guaranteed send runs out of ACK waits and raises, saying the job
    may be stored and where to look. What it sent is read once the journal can be
    written again: the job is stored (and sending it again is a duplicate)."""
    r = start()
    shell = sqlite3.connect(r.journal, timeout=0, isolation_level=None)
    shell.execute("BEGIN IMMEDIATE")
    client = Client(r.frontend)
    msgid = new_msgid()
    try:
        # A first job makes the router find the lock held (and stop reading clients).
        first = new_msgid()
        with pytest.raises(BrokerUnavailable) as first_refused:
            client.send_request_guaranteed(
                first.encode(), b"default", b"guarantee", JOB.encode(), ack_timeout=0.3, retries=0
            )
        r.proc.wait_output(r"journal .* cannot be written: locked")
        with pytest.raises(BrokerUnavailable) as refused:
            client.send_request_guaranteed(
                msgid.encode(), b"default", b"guarantee", JOB.encode(), ack_timeout=0.3, retries=1
            )
        for info in (first_refused, refused):
            text = str(info.value)
            assert "it may be stored" in text and "journal" in text
        assert msgid not in stored(r.journal)
    finally:
        shell.execute("ROLLBACK")
        shell.close()
    try:
        wait_for(lambda: {first, msgid} <= stored(r.journal), what="the jobs stored at last")
        client.send_request_guaranteed(
            msgid.encode(), b"default", b"guarantee", JOB.encode(), ack_timeout=5.0, retries=3
        )
    finally:
        client.close()
