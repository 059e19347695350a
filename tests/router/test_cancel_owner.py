"""CANCEL_POLICY with CURVE: a CANCEL is honoured only from the key that sent the job
or an admin key (``owner``, the default), or from any client key (``any``).

A real router process with CURVE; two client keys and an admin key that is also
listed as a frontend client. Jobs wait (no job manager) while the CANCELs come;
then a job manager runs what was not cancelled. A cancelled job whose client asked
for a reply gets the "Cancelled" reply.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from django_eventmq.protocol import (
    Ack,
    Cancel,
    JobBody,
    Reply,
    Request,
    new_msgid,
    parse_headers,
)
from django_eventmq.protocol.batch import pack_jobs
from django_eventmq.router.journal import commit as journal_module
from django_eventmq.router.router import Router as RouterLoop
from django_eventmq.runtime import transport
from django_eventmq.runtime.transport import Channel
from tests.keys import Keys
from tests.router.test_outbox import BODY
from tests.router.test_router import make_settings
from tests.support import Proc, python_module, tcp_addr, wait_for
from tests.system.e2e.test_curve import _client_options, _jobmanager, _ran


class Router:
    """A CURVE router process on fixed addresses (so it can be restarted on its journal)."""

    def __init__(self, keys: Keys, journal: Path, **env: str) -> None:
        self.addrs = {"frontend": tcp_addr(), "backend": tcp_addr(), "admin": tcp_addr()}
        self.env = {
            "EMQ_CURVE_SERVER_SECRET_KEY": keys.server[1],
            # The admin key is a client key as well, so it can send CANCEL.
            "EMQ_CURVE_FRONTEND_CLIENTS": f"{keys.client[0]},{keys.stranger[0]},{keys.admin[0]}",
            "EMQ_CURVE_BACKEND_WORKERS": keys.worker[0],
            "EMQ_CURVE_ADMIN_CLIENTS": keys.admin[0],
            "EMQ_JOURNAL_PATH": str(journal),
            **env,
        }
        self.proc = self.start()

    def start(self) -> Proc:
        a = self.addrs
        proc = Proc(
            python_module(
                "router", "--frontend", a["frontend"], "--backend", a["backend"],
                "--admin", a["admin"],
            ),
            env=self.env,
        )  # fmt: skip
        proc.wait_output(r"router ready")
        return proc

    def restart(self) -> None:
        assert self.proc.stop() == 0, self.proc.output()
        self.proc = self.start()


class Peer:
    """A client with one CURVE key."""

    def __init__(self, keys: Keys, pair: tuple[str, str], frontend: str) -> None:
        self.channel = Channel(
            transport.DEALER, connect=frontend, options=_client_options(keys, pair)
        )
        self.replies: dict[str, str] = {}

    def send_job(self, out: Path, tag: str) -> str:
        """A job recording ``tag`` when it runs; returns once the router ACKed it."""
        body = JobBody(path="tests.jobs_fixtures.sample", callable="record", args=(str(out), tag))
        msgid = new_msgid()
        headers = parse_headers("guarantee,reply-requested")
        self.channel.send(
            Request(msgid=msgid, queue="default", headers=headers, body_text=body.encode())
        )
        wait_for(lambda: self._read(Ack, msgid), 20, f"the ACK of job {tag}")
        return msgid

    def cancel(self, job_msgid: str) -> None:
        self.channel.send(Cancel(msgid=new_msgid(), job_msgid=job_msgid))

    def reply(self, job_msgid: str) -> str:
        wait_for(lambda: self._read(Reply, job_msgid), 20, f"a reply for {job_msgid}")
        return self.replies[job_msgid]

    def _read(self, kind: type, msgid: str) -> bool:
        while self.channel.poll(50):
            _identity, _frames, message = self.channel.recv()
            if isinstance(message, Reply) and message.reply_to:
                self.replies[message.reply_to] = message.payload
            if isinstance(message, Ack) and kind is Ack and message.ack_msgid == msgid:
                return True
        return kind is Reply and msgid in self.replies

    def close(self) -> None:
        self.channel.close()


@pytest.fixture
def peers(keys: Keys) -> Iterator[list[Peer]]:
    made: list[Peer] = []
    yield made
    for peer in made:
        peer.close()


def connect(keys: Keys, router: Router, peers: list[Peer], *pairs: tuple[str, str]) -> list[Peer]:
    made = [Peer(keys, pair, router.addrs["frontend"]) for pair in pairs]
    peers.extend(made)
    return made


def test_only_the_owner_or_an_admin_key_may_cancel_also_after_a_restart(
    keys: Keys, tmp_path: Path, peers: list[Peer]
) -> None:
    out = tmp_path / "ran.txt"
    router = Router(keys, tmp_path / "journal.sqlite3")
    manager = None
    try:
        owner, other, admin = connect(keys, router, peers, keys.client, keys.stranger, keys.admin)
        foreign, own, by_admin, stored = (
            owner.send_job(out, tag) for tag in ("foreign", "own", "admin", "stored")
        )
        other.cancel(foreign)
        owner.cancel(own)
        admin.cancel(by_admin)
        assert "Cancelled" in owner.reply(own)
        assert "Cancelled" in owner.reply(by_admin)
        router.proc.wait_output(
            r"CANCEL for a job sent with another CURVE key .* refused for msgid " + foreign
        )

        # The owner's key is in the journal: after a restart a foreign CANCEL is refused still.
        router.restart()
        other, owner = connect(keys, router, peers, keys.stranger, keys.client)
        other.cancel(stored)
        router.proc.wait_output(r"refused for msgid " + stored)
        manager = _jobmanager(keys, router.addrs["backend"], keys.worker)
        wait_for(lambda: {"foreign", "stored"} <= _ran(out), 30, "the jobs not cancelled to run")
        # One job at a time (concurrency 1), in the order sent: not cancelled, "own"
        # and "admin" would have run before "stored".
        assert not {"own", "admin"} & _ran(out)
    finally:
        if manager is not None:
            manager.stop()
        router.proc.stop()


def test_cancel_policy_any_lets_every_client_key_cancel(
    keys: Keys, tmp_path: Path, peers: list[Peer]
) -> None:
    router = Router(keys, tmp_path / "journal.sqlite3", EMQ_CANCEL_POLICY="any")
    try:
        owner, other = connect(keys, router, peers, keys.client, keys.stranger)
        job = owner.send_job(tmp_path / "ran.txt", "job")
        other.cancel(job)
        assert "Cancelled" in owner.reply(job)
        assert "refused" not in router.proc.output()
    finally:
        router.proc.stop()


@pytest.fixture
def owners_router(tmp_path: Path) -> Iterator[RouterLoop]:
    """A router in this thread, journal on a file, owners kept. The key the ZAP
    handler would read with each message is set by hand (``_sender``); CURVE
    itself is exercised by the tests above."""
    router = RouterLoop(
        make_settings(journal=True, journal_path=str(tmp_path / "journal.sqlite3"), queue_window=2)
    )
    router.start()
    router.front._owners = True
    try:
        yield router
    finally:
        router.close()


def cancel(router: RouterLoop, key: str, job_msgid: str) -> None:
    router.front._sender = key
    router.front._on_cancel(key.encode(), [], Cancel(msgid=new_msgid(), job_msgid=job_msgid), 0.0)


def test_a_cancel_is_refused_while_the_journal_cannot_say_who_sent_the_job(
    owners_router: RouterLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sender's key is in the job's journal row. While that row cannot be
    written (the journal locked by another connection), the router cannot tell
    the owner, so a CANCEL from another key is refused, not honoured as for a
    job it does not hold; once the journal is writable again the check holds."""
    monkeypatch.setattr(journal_module, "RETRY_INTERVAL", 0.0)  # retried at the next commit
    router = owners_router
    lock = sqlite3.connect(router.book.journal.path, timeout=0, isolation_level=None)
    try:
        frames = [b"", b"eMQP/1.0", b"REQUEST", b"m-1", b"default", b"guarantee", BODY]
        router.book.accept(b"a", frames, "m-1", "default", parse_headers("guarantee"), 0.0, "key-A")
        lock.execute("BEGIN IMMEDIATE")  # the job's row is not written yet, and now cannot be

        cancel(router, "key-B", "m-1")
        assert "m-1" in router.routing.waiting.index  # not cancelled

        lock.execute("ROLLBACK")
        assert router.book.journal.commit()  # writable again: the row is stored
        cancel(router, "key-B", "m-1")
        assert "m-1" in router.routing.waiting.index
        assert router.front.cancels_refused == 1
        cancel(router, "key-A", "m-1")
        assert "m-1" not in router.routing.waiting.index  # its owner's CANCEL is honoured
    finally:
        lock.close()


def test_a_batch_behind_a_queue_on_disk_keeps_its_senders_key_per_job(
    owners_router: RouterLoop,
) -> None:
    """A BATCH that would be stored whole (a parcel: its queue waits on disk
    already) is stored job by job while owners are kept, each row with the
    sender's key, so another key's CANCEL of one of its jobs (waiting on disk
    only, not in memory) is refused and the sender's own is honoured."""
    router = owners_router
    router.front._sender = "key-A"
    for n in range(3):  # past QUEUE_WINDOW (2): the queue waits on disk
        router.front._fast_request((b"a", b"r-%d" % n, b"default", b"", BODY), 0.0)
    jobs = [(b"b-%d" % n, b"default", b"", BODY) for n in range(3)]
    router.front._fast_batch((b"a", b"batch-1", pack_jobs(jobs)), 0.0)
    assert router.book.journal.owner_of("b-1") == "key-A"

    cancel(router, "key-B", "b-1")
    assert router.front.cancels_refused == 1
    cancel(router, "key-A", "b-1")
    assert router.book.journal.owner_of("b-1") is None  # cancelled: no longer held
    assert router.book.journal.owner_of("b-2") == "key-A"
