"""A router group's members when things go wrong around them: a clean stop hands the
lease over at once, a leader that cannot bind gives it back, PostgreSQL unreachable,
and what a standby's admin socket answers."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from django_eventmq.runtime import admin_client
from django_eventmq.runtime.settings import Settings
from tests.pg_support import pg_dsn, pg_group  # noqa: F401 - fixtures
from tests.support import free_port, wait_for
from tests.system.chaos.support import admin_call
from tests.system.ha_group.support import Group, Member

#: Longer than any wait below: a member that leads before it ran out was handed the
#: lease (released), not left to take it.
LONG_LEASE = 120.0


@pytest.fixture
def group(pg_dsn: str, pg_group: str, tmp_path: Path) -> Iterator[Group]:  # noqa: F811
    made = Group(pg_dsn, pg_group, tmp_path, lease=LONG_LEASE)
    try:
        yield made
    finally:
        made.stop()
        print(made.outputs())  # shown when the test failed


def test_sigterm_of_the_leader_releases_the_lease_to_the_standby(group: Group) -> None:
    assert group.a.proc.stop() == 0
    assert "released epoch 1" in group.a.proc.output()
    wait_for(lambda: group.b.role() == "leader", 30, "B to lead long before the lease ran out")
    assert group.b.status()["epoch"] == 2


def test_a_leader_refuses_disconnect_without_the_admin_token_and_stops_with_it(
    group: Group,
) -> None:
    """The leader's router answers on the member's admin socket with the member's token."""
    refused = _disconnect(group.a.admin)
    assert refused[2] == b"REPLY" and b"without the admin token" in refused[4]
    assert group.a.role() == "leader" and group.a.proc.popen.poll() is None
    admin_client.stop_router(group.a.admin, 20, settings=Settings())
    assert group.a.proc.popen.wait(30) == 0
    assert "released epoch 1" in group.a.proc.output()


def test_a_member_that_wins_but_cannot_bind_gives_the_lease_back(group: Group) -> None:
    assert group.b.proc.stop() == 0  # only C may take over from A
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        port = taken.getsockname()[1]
        c = group.member("c", frontend=f"tcp://127.0.0.1:{port}")
        c.proc.wait_output(r"standby in group")
        assert group.a.proc.stop() == 0
        assert c.proc.popen.wait(30) == 1
    out = c.proc.output()
    assert "FRONTEND_ADDR" in out, out
    assert "released epoch 2" in out, out
    d = group.member("d")
    wait_for(lambda: d.role() == "leader", 30, "D to lead long before the lease ran out")
    assert d.status()["epoch"] == 3


def test_a_standby_answers_every_admin_question(group: Group) -> None:
    for command in ("ROUTER_SHOW_WORKERS", "ROUTER_SHOW_SCHEDULERS", "MONITOR"):
        answer = admin_call(group.b.admin, command)
        assert answer["role"] == "standby", (command, answer)
    assert admin_call(group.b.admin, "ROUTER_SHOW_WORKERS")["connected_workers"] == {}


def _disconnect(addr: str) -> list[bytes]:
    ctx: zmq.Context[Any] = zmq.Context.instance()
    sock: zmq.Socket[Any] = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(addr)
        sock.send_multipart([b"", b"eMQP/1.0", b"DISCONNECT", b"bye-1"])
        assert sock.poll(10_000), "no answer to DISCONNECT"
        return sock.recv_multipart()  # type: ignore[no-any-return]
    finally:
        sock.close(linger=0)


def test_without_postgresql_a_member_stands_by_says_so_once_and_stops_on_disconnect(
    pg_group: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    nowhere = f"postgresql://postgres@127.0.0.1:{free_port()}/test?connect_timeout=1"
    m = Member("lonely", nowhere, pg_group, {"EMQ_HEARTBEAT_INTERVAL": "0.5"})
    try:
        m.proc.wait_output(r"PostgreSQL at 127\.0\.0\.1:\d+/test: OperationalError")
        status = m.status()
        assert (status["role"], status["group"]) == ("standby", pg_group)
        assert "leader" not in status  # nobody is known to lead
        # Several polls later, still one line about it.
        wait_for(lambda: m.status().get("role") == "standby", 5, "STATUS")
        assert m.proc.output().count("PostgreSQL at") == 1
        # Without the admin token a standby stays up too; the shipped tool sends it.
        refused = _disconnect(m.admin)
        assert refused[2] == b"REPLY" and b"without the admin token" in refused[4]
        assert m.status().get("role") == "standby"
        admin_client.stop_router(m.admin, 20, settings=Settings())
        assert m.proc.popen.wait(20) == 0
    finally:
        m.proc.stop()


def test_manage_py_takes_a_databases_alias_as_the_journal(
    pg_group: str,  # noqa: F811
) -> None:
    from tests.support import Proc, tcp_addr

    admin = tcp_addr()
    proc = Proc(
        [
            sys.executable,
            "manage.py",
            "emq_router",
            "--journal",
            "default",
            "--group",
            pg_group,
            "--frontend",
            tcp_addr(),
            "--backend",
            tcp_addr(),
            "--admin",
            admin,
        ],
        env={
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "EMQ_TEST_DB": "postgres",
            "EMQ_HEARTBEAT_INTERVAL": "0.5",
        },
    )
    try:
        proc.wait_output(rf"journal: postgresql://postgres@127\.0\.0\.1:5432/test#{pg_group}")
        status = admin_call(admin, "STATUS")
        assert (status["role"], status["group"], status["epoch"]) == ("leader", pg_group, 1)
    finally:
        assert proc.stop() == 0
