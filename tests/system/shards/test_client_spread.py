"""A client of several router groups, on real routers (SQLite journals: one router
per group is enough here): where each job goes, replies, a group with no router,
every group down. The PostgreSQL groups are in test_shards.py."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from django_eventmq.client.connection import Client
from django_eventmq.client.pool import connect
from django_eventmq.client.shards import ShardedClient
from django_eventmq.errors import BrokerUnavailable
from django_eventmq.protocol import Headers, Reply, new_msgid
from tests.support import Proc, python_module, tcp_addr, wait_for
from tests.system.chaos.jobs import RECORD_ENV
from tests.system.chaos.support import LOG_LEVEL, admin_call, body, start_router
from tests.system.shards.support import ENV, queue_of_group

QA, QB = queue_of_group(0), queue_of_group(1)


class Router:
    def __init__(self, workdir: Path, name: str) -> None:
        self.frontend, self.backend, self.admin = tcp_addr(), tcp_addr(), tcp_addr()
        self.journal = workdir / f"{name}.sqlite"
        self.proc: Proc | None = None

    def start(self) -> None:
        self.proc = start_router(self.frontend, self.backend, self.admin, self.journal, **ENV)

    def counts(self) -> dict[str, int]:
        """Jobs of each queue this router holds or held (MONITOR's per-queue counts)."""
        per_queue = admin_call(self.admin, "MONITOR", 5.0).get("per_queue", {})
        return {q: sum(v.values()) for q, v in per_queue.items()}

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()


@pytest.fixture
def routers(tmp_path: Path) -> Iterator[list[Router]]:
    made = [Router(tmp_path, "one"), Router(tmp_path, "two")]
    try:
        yield made
    finally:
        for router in made:
            with contextlib.suppress(Exception):
                router.stop()


def sharded(addr: str, *, send_timeout: float = 1.0, shard_by: str = "queue") -> ShardedClient:
    client = connect(addr, send_timeout=send_timeout, shard_by=shard_by)
    assert isinstance(client, ShardedClient)
    return client


def test_jobs_go_to_their_queue_group_and_replies_come_back_on_its_socket(
    routers: list[Router], tmp_path: Path
) -> None:
    for router in routers:
        router.start()
    # WORKER_ADDR of two groups; the first names a second member (nothing there),
    # as a group with a standby does.
    worker = f"{routers[0].backend},{tcp_addr()};{routers[1].backend}"
    jm = Proc(
        python_module(
            "jobmanager",
            "--broker",
            worker,
            "--queues",
            f"{QA}:1,{QB}:1",
            "--job-module",
            "tests.system.chaos.jobs",
            "--log-level",
            LOG_LEVEL,
        ),
        env={**ENV, RECORD_ENV: str(tmp_path / "ran.txt")},
    )
    client = sharded(f"{routers[0].frontend};{routers[1].frontend}")
    try:
        headers = Headers(reply_requested=True)
        sent = {}
        for queue in (QA, QB, QA, QB):
            msgid = new_msgid()
            client.request(queue, body(msgid).decode(), headers=headers, msgid=msgid)
            sent[msgid] = queue
        for msgid, queue in sent.items():
            outcome = client.outcome(msgid, 30)
            assert isinstance(outcome, Reply), (msgid, queue, jm.output())
            # It came on the socket of the group that took the job.
            index = 0 if queue == QA else 1
            assert client.clients[index].seen(msgid) is outcome
            assert client.clients[1 - index].seen(msgid) is None
        assert client.down == [False, False]
        # Jobs sent in bulk are not remembered by msgid: their outcomes are looked
        # for on every group's socket.
        wanted = Headers(reply_requested=True, guarantee=True).encode().encode()
        bulk = {f"bulk-{q}": q for q in (QA, QB)}
        result = client.send_many(
            (m.encode(), q.encode(), wanted, body(m)) for m, q in bulk.items()
        )
        assert result.acked == 2
        for msgid in bulk:
            assert isinstance(client.outcome(msgid, 30), Reply), jm.output()
    finally:
        client.close()
        jm.stop()


def test_a_group_without_a_router_is_skipped_until_one_is_there(routers: list[Router]) -> None:
    first, second = routers
    second.start()  # nothing listens at the first group's address yet
    client = sharded(f"{first.frontend};{second.frontend}")
    try:
        # Guaranteed (.delay() with guarantee): ACKed by the group that stored it.
        client.send_request_guaranteed(
            b"g-1", QA.encode(), b"guarantee", body("g-1"), ack_timeout=2.0, retries=3
        )
        assert client.down == [True, False]
        client.send_request_frames(b"p-1", QA.encode(), b"", body("p-1"))
        result = client.send_many(
            [(f"b-{n}".encode(), QA.encode(), b"guarantee", body(f"b-{n}")) for n in range(50)]
        )
        assert result.acked == 50
        wait_for(lambda: second.counts().get(QA) == 52, 10, "the second group to hold 52 jobs")
        # A router of the first group starts: its queue's jobs go there again.
        first.start()
        wait_for(lambda: client._up(0), 10, "the first group's connection")
        assert client.down == [False, False]
        client.send_request_guaranteed(
            b"g-2", QA.encode(), b"guarantee", body("g-2"), ack_timeout=2.0, retries=3
        )
        assert first.counts().get(QA) == 1
    finally:
        client.close()


def test_every_group_down_raises_and_names_them() -> None:
    one, two = tcp_addr(), tcp_addr()
    client = sharded(f"{one};{two}", send_timeout=0.2)
    try:
        with pytest.raises(BrokerUnavailable) as caught:
            client.send_request_frames(b"x-1", QA.encode(), b"", body("x-1"))
        text = str(caught.value)
        assert f"no router group of {one};{two} took the message" in text
        assert "group 1:" in text and "group 2:" in text
        assert client.down == [True, True]
        # Again, with both known down: the job's own group is still given SEND_TIMEOUT.
        with pytest.raises(BrokerUnavailable, match="group 1: no router at"):
            client.send_request_frames(b"x-2", QA.encode(), b"", body("x-2"))
        with pytest.raises(BrokerUnavailable, match=r"no router of any group .* was connected"):
            client.send_many([(b"x-3", QA.encode(), b"guarantee", body("x-3"))])
    finally:
        client.close()


def test_schedules_go_to_their_queue_group_even_round_robin(routers: list[Router]) -> None:
    for router in routers:
        router.start()
    client = sharded(f"{routers[0].frontend};{routers[1].frontend}", shard_by="round_robin")
    try:
        for n in range(4):
            client.schedule(QB, body(f"s-{n}").decode(), interval=60)
        wait_for(
            lambda: admin_call(routers[1].admin, "MONITOR", 5.0).get("schedules_kept") == 4,
            10,
            "the second group to keep 4 schedules",
        )
        assert admin_call(routers[0].admin, "MONITOR", 5.0).get("schedules_kept") == 0
    finally:
        client.close()


def test_one_group_is_the_plain_client_as_before() -> None:
    one = connect(f"{tcp_addr()},{tcp_addr()}", send_timeout=0.2)
    try:
        assert isinstance(one, Client)
    finally:
        one.close()
