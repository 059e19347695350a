"""PipelinedSender: the executor side, without Spark (pyzmq and real sockets only).

Against our router process for ACKs and REJECTs; against a scripted ROUTER
socket in this test for what a healthy router never does (answer late, say
nothing, send garbage).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from django_eventmq.contrib.spark.sender import PipelinedSender
from django_eventmq.errors import BrokerUnavailable, RouterFull
from django_eventmq.runtime import security
from django_eventmq.runtime.settings import from_mapping
from tests.fake_router import ScriptedRouter
from tests.support import Proc, python_module, tcp_addr

pytestmark = pytest.mark.spark

BODY = b'["run",{"callable":"noop","path":"benchmarks.noop_jobs","args":[],"kwargs":{}}]'


def requests(n: int, prefix: str = "t") -> tuple[list[bytes], list[bytes], list[bytes]]:
    return [f"{prefix}:{i}".encode() for i in range(n)], [b"email"] * n, [BODY] * n


@pytest.fixture
def router(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """Start our router process with extra EMQ_* settings; returns its frontend."""
    procs: list[Proc] = []

    def start(**env: str) -> str:
        any_port = "tcp://127.0.0.1:*"
        proc = Proc(
            python_module(
                "router", "--frontend", any_port, "--backend", any_port, "--admin", any_port
            ),
            env={"EMQ_JOURNAL_PATH": str(tmp_path / "journal.sqlite3"), **env},
        )
        procs.append(proc)
        return proc.wait_output(r"router ready: frontend=(\S+)").group(1)

    yield start
    for proc in procs:
        proc.stop()


def ack(frames: list[bytes]) -> list[bytes]:
    return [b"", b"eMQP/1.0", b"ACK", b"router-id", frames[3]]


def test_every_request_is_acknowledged_by_our_router(router):
    frontend = router()
    msgids, queues, bodies = requests(3_000)
    with PipelinedSender(frontend, window=100) as sender:
        sender.send_columns(msgids, queues, b"guarantee", bodies)
        sender.flush()
        assert sender.in_flight == 0
    counts = sender.counts["email"]
    assert (counts.sent, counts.acked, counts.rejected, counts.resent) == (3_000, 3_000, 0, 0)


def test_over_the_high_water_mark_our_router_rejects_and_we_count_it(router):
    # No job manager: jobs wait in the router, and past 20 it refuses them.
    frontend = router(EMQ_HWM_POLICY="reject", EMQ_HIGH_WATER_MARK="20")
    msgids, queues, bodies = requests(50)
    with PipelinedSender(frontend, window=10) as sender:
        sender.send_columns(msgids, queues, b"guarantee", bodies)
        sender.flush()
    counts = sender.counts["email"]
    assert counts.sent == 50
    assert counts.acked + counts.rejected == 50
    assert counts.rejected >= 30
    # The router's words, kept for the report: full, and what to do.
    assert counts.reasons and counts.reasons[0].startswith("router is full: over its high-water")
    assert "start a job manager for queue email" in counts.reasons[0]


def test_an_unanswered_request_is_sent_again_with_the_same_msgid():
    seen: Counter[bytes] = Counter()

    def second_copy_only(frames: list[bytes], _n: int) -> list[list[bytes]]:
        seen[frames[3]] += 1
        return [ack(frames)] if seen[frames[3]] == 2 else []

    with (
        ScriptedRouter(second_copy_only) as peer,
        PipelinedSender(peer.addr, window=50, ack_timeout=0.2, give_up=10) as sender,
    ):
        msgids, queues, bodies = requests(20)
        sender.send_columns(msgids, queues, b"guarantee", bodies)
        sender.flush()
    counts = sender.counts["email"]
    assert (counts.sent, counts.acked, counts.resent) == (20, 20, 20)
    assert set(seen.values()) == {2}
    # A resend is the same REQUEST: same msgid, queue, headers and body.
    copies = [f for f in peer.received if f[3] == b"t:7"]
    assert len(copies) == 2 and copies[0] == copies[1]


def test_a_late_second_ack_counts_once():
    def ack_twice(frames: list[bytes], _n: int) -> list[list[bytes]]:
        return [ack(frames), ack(frames)]

    with ScriptedRouter(ack_twice) as peer, PipelinedSender(peer.addr) as sender:
        msgids, queues, bodies = requests(30)
        sender.send_columns(msgids, queues, b"guarantee", bodies)
        sender.flush()
    assert sender.counts["email"].acked == 30


def test_no_router_makes_flush_raise_broker_unavailable_asking_if_it_runs():
    with PipelinedSender(tcp_addr(), ack_timeout=0.1, give_up=0.5) as sender:
        sender.send(b"t:1", b"email", b"guarantee", BODY)
        with pytest.raises(BrokerUnavailable, match=r"nothing for 0.5s; 1 REQUEST") as info:
            sender.flush()
    assert "is emq_router running?" in str(info.value)
    assert not isinstance(info.value, RouterFull)
    assert sender.counts["email"].resent >= 1


def test_a_full_router_makes_flush_raise_router_full_saying_what_to_do(router):
    """Above its mark (policy block) our router reads no client but stays connected:
    the sender says the router is full, not that it may not run."""
    frontend = router(EMQ_HIGH_WATER_MARK="20", EMQ_QUEUE_WINDOW="5")
    msgids, queues, bodies = requests(60)
    with (
        PipelinedSender(frontend, window=40, batch=10, ack_timeout=0.5, give_up=2) as sender,
        pytest.raises(RouterFull) as info,
    ):
        sender.send_columns(msgids, queues, b"guarantee", bodies)
        sender.flush()
    text = str(info.value)
    assert f"the router at {frontend} is full" in text
    assert "queue 'email'" in text and "HIGH_WATER_MARK (20 jobs)" in text
    assert "emq_jobmanager --queues email" in text and "the same run_id" in text
    assert "is emq_router running" not in text
    assert 20 <= sender.counts["email"].acked < 60


def test_a_msgid_already_in_flight_is_not_sent_twice():
    with (
        ScriptedRouter(lambda frames, n: [ack(frames)]) as peer,
        PipelinedSender(peer.addr) as sender,
    ):
        sender.send_columns([b"same", b"same", b"other"], [b"email"] * 3, b"", [BODY] * 3)
        sender.flush()
    counts = sender.counts["email"]
    assert (counts.sent, counts.duplicates, counts.acked) == (2, 1, 2)


def test_garbage_from_the_router_is_logged_once_and_ignored(caplog):
    def garbage_then_ack(frames: list[bytes], _n: int) -> list[list[bytes]]:
        return [[b"", b"nonsense"], [b"", b"eMQP/1.0", b"BOGUS", b"x"], ack(frames)]

    caplog.set_level(logging.WARNING, "django_eventmq.spark")
    with ScriptedRouter(garbage_then_ack) as peer, PipelinedSender(peer.addr) as sender:
        msgids, queues, bodies = requests(10)
        sender.send_columns(msgids, queues, b"guarantee", bodies)
        sender.flush()
    assert sender.counts["email"].acked == 10
    warnings = [r for r in caplog.records if r.name == "django_eventmq.spark"]
    assert len(warnings) == 1
    assert "malformed message from the router" in warnings[0].getMessage()


def test_bad_window_is_refused():
    with pytest.raises(ValueError, match="window must be at least 1"):
        PipelinedSender("tcp://127.0.0.1:1", window=0)


def test_with_curve_only_a_sender_with_the_client_key_is_acknowledged(router, monkeypatch):
    server, client, worker, stranger = (security.generate_keypair() for _ in range(4))
    frontend = router(
        EMQ_CURVE_SERVER_SECRET_KEY=server[1],
        EMQ_CURVE_FRONTEND_CLIENTS=client[0],
        EMQ_CURVE_BACKEND_WORKERS=worker[0],
        EMQ_CURVE_ADMIN_CLIENTS=worker[0],
    )

    def keyed(pair):
        mapping = {"CURVE_SERVER_PUBLIC_KEY": server[0], "CURVE_CLIENT_SECRET_KEY": pair[1]}
        return from_mapping(mapping, environ={})

    msgids, queues, bodies = requests(20)
    with PipelinedSender(frontend, settings=keyed(client)) as sender:
        sender.send_columns(msgids, queues, b"guarantee", bodies)
        sender.flush()
    assert sender.counts["email"].acked == 20
    # An executor takes its keys from EMQ_* when it is given no settings.
    monkeypatch.setenv("EMQ_CURVE_SERVER_PUBLIC_KEY", server[0])
    monkeypatch.setenv("EMQ_CURVE_CLIENT_SECRET_KEY", client[1])
    with PipelinedSender(frontend) as sender:
        sender.send(b"env:1", b"email", b"guarantee", BODY)
        sender.flush()
    assert sender.counts["email"].acked == 1
    monkeypatch.delenv("EMQ_CURVE_SERVER_PUBLIC_KEY")
    monkeypatch.delenv("EMQ_CURVE_CLIENT_SECRET_KEY")
    for settings in (None, keyed(stranger)):
        with (
            PipelinedSender(frontend, settings=settings, ack_timeout=0.2, give_up=1.0) as sender,
            pytest.raises(BrokerUnavailable),
        ):
            sender.send(b"refused:1", b"email", b"guarantee", BODY)
            sender.flush()
        assert sender.counts["email"].acked == 0


def test_a_silent_router_that_never_answered_features_may_be_the_reference():
    """Connected and silent from the start: a router of ours blocked since, or the
    reference router, which answers only a job it forwards at once: both named."""
    with (
        ScriptedRouter(lambda frames, n: []) as peer,  # like the reference: FEATURES aside
        PipelinedSender(peer.addr, ack_timeout=0.1, give_up=0.5) as sender,
    ):
        sender.send(b"t:1", b"email", b"guarantee", BODY)
        with pytest.raises(RouterFull, match="is full") as info:
            sender.flush()
    assert "reference eventmq router" in str(info.value)
    assert "start more job managers" in str(info.value)
