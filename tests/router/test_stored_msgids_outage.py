"""A new job kept for the group write (its msgid ruled out by the book's filter)
while jobs wait on disk only, and the journal's lock held elsewhere: it is not
acknowledged until the commit holding it returned, then it is, and stored."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import zmq

from django_eventmq.router.router import Router
from tests.router.test_router import JOB, Peer, make_settings
from tests.support import wait_for


def answer(router: Router, client: Peer, msgid: str) -> str:
    """Run the router until ``client`` gets an answer; its command (for ``msgid``)."""

    def came() -> bool:
        router.loop_once(timeout_ms=10)
        return client.pending()

    wait_for(came, what=f"an answer to {msgid}")
    frames = client.recv_raw()
    assert frames[4].decode() == msgid
    return frames[2].decode()


@contextmanager
def spilled_router(
    zctx: zmq.Context[Any], path: Path
) -> Iterator[tuple[Router, Peer, sqlite3.Connection]]:
    """A router (queue window 1, journal busy timeout 10 ms) holding three jobs, two
    of them on disk only; its client; another connection to its journal."""
    settings = make_settings(
        journal=True, journal_path=str(path), queue_window=1, journal_busy_timeout=0.01
    )
    router = Router(settings)
    router.start()
    client = Peer(zctx, router.frontend_address, b"client")
    other = sqlite3.connect(path)
    try:
        for _ in range(3):  # no worker: the first waits in memory, the others on disk only
            msgid = client.send("REQUEST", "default", "guarantee", JOB)
            assert answer(router, client, msgid) == "ACK"
        yield router, client, other
    finally:
        other.close()
        client.close()
        router.close()


def test_a_kept_new_job_is_acknowledged_only_once_its_commit_returned(
    zctx: zmq.Context[Any], tmp_path: Path
) -> None:
    with spilled_router(zctx, tmp_path / "journal.sqlite3") as (router, client, other):
        other.execute("BEGIN IMMEDIATE")
        msgid = client.send("REQUEST", "default", "guarantee", JOB)

        def failed() -> bool:
            router.loop_once(timeout_ms=10)
            return router.book.journal.failure is not None

        wait_for(failed, what="its commit to fail")
        for _ in range(20):
            router.loop_once(timeout_ms=10)
        assert not client.pending()  # no ACK while it is not stored
        other.rollback()
        assert answer(router, client, msgid) == "ACK"
        assert router.book.journal.failure is None
        found = router.book.journal.find(msgid)
        assert found is not None and found[1].msgid == msgid
