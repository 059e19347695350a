"""``Client.send_many``: the guaranteed bulk send (a window of unacknowledged REQUESTs).

Against our router process for ACKs (sent once jobs are in the journal) and
REJECTs; against a scripted ROUTER socket for what a healthy router of ours
never does (answer only a resend, answer as the reference router does, say
nothing).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from django_eventmq.client.connection import Client
from django_eventmq.errors import BrokerUnavailable
from django_eventmq.protocol import Reply, Request, new_msgid, parse_headers
from tests.contrib.spark.test_sender import ack
from tests.fake_router import ScriptedRouter
from tests.support import Proc, tcp_addr, wait_for
from tests.system.chaos.support import admin_call, start_router

BODY = b'["run",{"callable":"noop","path":"benchmarks.noop_jobs","args":[],"kwargs":{}}]'


def encoded(n: int, prefix: str = "j", queue: bytes = b"email") -> list[tuple[bytes, ...]]:
    return [(f"{prefix}:{i}".encode(), queue, b"guarantee", BODY) for i in range(n)]


@pytest.fixture
def router(tmp_path: Path) -> Iterator[Callable[..., tuple[str, str]]]:
    """Start our router process with extra EMQ_* settings; returns (frontend, admin)."""
    procs: list[Proc] = []

    def start(**env: str) -> tuple[str, str]:
        frontend, backend, admin = tcp_addr(), tcp_addr(), tcp_addr()
        procs.append(start_router(frontend, backend, admin, tmp_path / "journal.db", **env))
        return frontend, admin

    yield start
    for proc in procs:
        proc.stop()


@pytest.fixture
def client_for() -> Iterator[Callable[[str], Client]]:
    made: list[Client] = []

    def connect(addr: str) -> Client:
        made.append(Client(addr))
        return made[-1]

    yield connect
    for client in made:
        client.close()


def test_every_request_is_stored_before_send_many_returns(router, client_for) -> None:
    # Every job held in memory, so a resent one is recognised at once (behind a
    # queue waiting on disk, a batch may be stored whole and its duplicates found
    # later: tests/router/test_batch_parcels.py).
    frontend, admin = router(EMQ_QUEUE_WINDOW="10000")
    client = client_for(frontend)
    messages = [
        Request(msgid=new_msgid(), queue="other", headers=parse_headers("guarantee"),
                body_text=BODY.decode())
        for _ in range(5)
    ]  # fmt: skip
    result = client.send_many([*encoded(3_000), *messages], window=200)
    assert (result.sent, result.acked, result.rejected) == (3_005, 3_005, {})
    assert result.counts["email"].acked == 3_000 and result.counts["other"].acked == 5
    info = admin_call(admin, "MONITOR")
    assert info["queued"] == 3_005 and info["duplicates"] == 0
    # The same msgids again are the same jobs: acknowledged, not queued twice.
    again = client.send_many(encoded(3_000), window=200)
    assert again.acked == 3_000
    assert admin_call(admin, "MONITOR")["queued"] == 3_005


def test_refused_requests_are_reported_with_the_router_s_reason(router, client_for) -> None:
    # No job manager: jobs wait in the router, and past 20 it refuses them.
    frontend, _admin = router(EMQ_HWM_POLICY="reject", EMQ_HIGH_WATER_MARK="20")
    result = client_for(frontend).send_many(encoded(50), window=10)
    assert result.sent == 50 and result.acked + len(result.rejected) == 50
    assert len(result.rejected) >= 30
    assert all("high-water mark" in reason for reason in result.rejected.values())


def test_an_unacknowledged_request_is_sent_again_with_the_same_msgid(client_for) -> None:
    seen: Counter[bytes] = Counter()

    def second_copy_only(frames: list[bytes], _n: int) -> list[list[bytes]]:
        seen[frames[3]] += 1
        return [ack(frames)] if seen[frames[3]] == 2 else []

    with ScriptedRouter(second_copy_only) as peer:
        result = client_for(peer.addr).send_many(encoded(20), ack_timeout=0.2)
    assert (result.sent, result.acked, result.resent) == (20, 20, 20)
    assert set(seen.values()) == {2}


def test_outcomes_of_other_jobs_arriving_meanwhile_are_kept_for_their_handles(
    client_for,
) -> None:
    earlier = new_msgid()

    def ack_and_an_outcome(frames: list[bytes], n: int) -> list[list[bytes]]:
        answers = [ack(frames)]
        if n == 1:  # the outcome of a job sent before, as a job manager's REPLY
            answers.insert(
                0, [b"", b"eMQP/1.0", b"REPLY", b"r1", b'{"value": 7}', earlier.encode()]
            )
        return answers

    with ScriptedRouter(ack_and_an_outcome) as peer:
        client = client_for(peer.addr)
        assert client.send_many(encoded(10)).acked == 10
    outcome = client.outcome(earlier, timeout=0)
    assert isinstance(outcome, Reply) and outcome.payload == '{"value": 7}'


def test_the_reference_router_s_receipt_counts_as_an_ack(client_for) -> None:
    def receipt(frames: list[bytes], _n: int) -> list[list[bytes]]:
        return [[b"", b"eMQP/1.0", b"REPLY", b"r", frames[3]]]

    with ScriptedRouter(receipt) as peer:
        result = client_for(peer.addr).send_many(encoded(15))
    assert result.acked == 15


def test_a_silent_router_makes_send_many_raise(client_for) -> None:
    with ScriptedRouter(lambda frames, n: []) as peer:
        client = client_for(peer.addr)
        with pytest.raises(BrokerUnavailable, match=r"answered nothing for 0\.5s; 3 REQUEST"):
            client.send_many(encoded(3), ack_timeout=0.1, give_up=0.5)


def test_without_guarantee_nothing_is_waited_for(client_for) -> None:
    with ScriptedRouter(lambda frames, n: []) as peer:
        result = client_for(peer.addr).send_many(encoded(25), guarantee=False)
        assert (result.sent, result.acked) == (25, 0)  # returned with no answer at all
        wait_for(lambda: len(peer.received) == 25, 20, "the 25 REQUESTs to arrive")


def test_a_bad_window_is_refused(client_for) -> None:
    with pytest.raises(ValueError, match="window must be at least 1"):
        client_for(tcp_addr()).send_many(encoded(1), window=0)


def test_with_the_router_gone_send_many_raises_after_send_timeout_not_give_up() -> None:
    """A client that talked to a router before (its FEATURES known), the router gone:
    no connection takes a job, so send_many says so after SEND_TIMEOUT, as .delay()
    does; it waited give_up (default 120 s), then blamed a silent router."""
    with ScriptedRouter(lambda frames, n: [ack(frames)]) as peer:
        client = Client(peer.addr, send_timeout=0.5, watch_peer=True)
        try:
            assert client.send_many(encoded(3)).acked == 3
            peer_addr = peer.addr
        except BaseException:
            client.close()
            raise
    try:
        # Gone for good: its connection is down (a job sent into it while it drops
        # is in flight, and waits give_up like any unanswered one).
        wait_for(lambda: client.channel.peer_connected() is False, what="the connection down")
        with pytest.raises(BrokerUnavailable, match=r"within SEND_TIMEOUT=0\.5s"):
            client.send_many(encoded(3, prefix="k"), give_up=600)
        assert client.addr == peer_addr
    finally:
        client.close()
