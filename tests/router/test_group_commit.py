"""Group commit under load: while clients keep sending, ACKs wait for a bigger commit, for
at most COMMIT_GROUP_WAIT; never is an ACK sent for a job that is not committed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from django_eventmq.router import commit_acks
from django_eventmq.router.router import Router
from tests.router.test_router import JOB, Peer, make_settings
from tests.support import wait_for

JOBS = 3000


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[Router, Peer]]:
    ctx: zmq.Context[Any] = zmq.Context()
    router = Router(make_settings(journal=True, journal_path=str(tmp_path / "j.sqlite3")))
    router.start()
    client = Peer(ctx, router.frontend_address, b"client-1")
    yield router, client
    client.close()
    router.close()
    ctx.term()


def acks(client: Peer) -> int:
    n = 0
    while client.pending():
        frames = client.recv_raw()
        assert frames[2] == b"ACK"
        n += 1
    return n


def test_acks_wait_for_a_bigger_commit_while_requests_keep_coming(
    setup: tuple[Router, Peer],
) -> None:
    router, client = setup
    for _ in range(JOBS):
        client.send("REQUEST", "default", "guarantee", JOB)
    assert router.frontend.poll(5000)
    frozen = time.monotonic()
    held_back = 0
    for _ in range(JOBS):  # one iteration per DRAIN_CAP messages at most
        syncs = router.book.journal.syncs
        router.loop_once(timeout_ms=0, now=frozen)
        if router.frontend.poll(0) and router.book.journal.pending < commit_acks.COMMIT_GROUP_MAX:
            # More to read, time frozen: no commit, so no ACK either.
            assert router.book.journal.syncs == syncs
            assert acks(client) == 0
            held_back += 1
        else:
            break
    assert held_back >= 1  # the case under test happened
    # Time moves past the wait: the group is committed and acknowledged.
    got = 0
    later = frozen + commit_acks.COMMIT_GROUP_WAIT
    while got < JOBS:
        router.loop_once(timeout_ms=10, now=later)
        got += acks(client)
        assert router.book.journal.pending == 0 or router.frontend.poll(0)
    assert router.book.backlog() == JOBS


def test_a_lone_request_is_acknowledged_at_once(setup: tuple[Router, Peer]) -> None:
    router, client = setup
    msgid = client.send("REQUEST", "default", "guarantee", JOB)
    frozen = time.monotonic()
    wait_for(lambda: router.frontend.poll(0), what="the REQUEST to arrive")
    router.loop_once(timeout_ms=0, now=frozen)  # nothing more to read: commit now
    assert router.book.journal.syncs >= 1
    assert client.expect("ACK")[2] == msgid


def test_a_request_arriving_during_the_turn_keeps_the_group_growing(
    setup: tuple[Router, Peer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drain read the frontend to the end; another REQUEST came while the turn
    went on (before the commit): the group waits for it, so neither a sync nor an
    ACK happens this turn."""
    router, client = setup
    client.send("REQUEST", "default", "guarantee", JOB)
    wait_for(lambda: router.frontend.poll(0), what="the first REQUEST")
    drain = router.front.drain

    def drain_then_another_arrives(t: float) -> None:
        drain(t)
        client.send("REQUEST", "default", "guarantee", JOB)
        wait_for(lambda: router.frontend.poll(0), what="the second REQUEST")

    monkeypatch.setattr(router.front, "drain", drain_then_another_arrives)
    syncs = router.book.journal.syncs
    router.loop_once(timeout_ms=0, now=time.monotonic())
    assert router.book.journal.syncs == syncs
    assert not client.pending()
