"""CURVE on real sockets, built the way the components build them.

A server Channel gets ``secure_channel_options(settings, role, "server")`` with a
:class:`Guard` running; peers get ``secure_channel_options(..., "client")``.
Only the right key for the role gets a message through; wrong keys, keys of
another role, no key at all and a wrong server key get nothing within a
deadline (a poll with a deadline: that is the condition being tested).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
import zmq

from django_eventmq.errors import ConfigurationError
from django_eventmq.protocol import Heartbeat, Request
from django_eventmq.runtime import security, transport
from django_eventmq.runtime.settings import Settings
from django_eventmq.runtime.transport import Channel
from tests.keys import Keys
from tests.support import wait_for

#: How long a refused peer is given to get a message through.
REFUSED_DEADLINE_MS = 1500

#: The peer key pair each role accepts (the publisher falls back to the frontend's).
ROLE_PEER = {"frontend": "client", "backend": "worker", "admin": "admin", "publisher": "client"}


@pytest.fixture
def guard(keys: Keys) -> Iterator[security.Guard]:
    g = security.Guard(keys.server_settings(), security.ROLES)
    g.start()
    yield g
    g.stop()


def _server(settings: Settings, role: str) -> Channel:
    return Channel(
        transport.ROUTER,
        bind="tcp://127.0.0.1:*",
        options=security.secure_channel_options(settings, role, security.SERVER),
    )


def _peer(addr: str, settings: Settings | None, name: str) -> Channel:
    options = (
        {}
        if settings is None
        else security.secure_channel_options(settings, "frontend", security.CLIENT)
    )
    return Channel(transport.DEALER, connect=addr, identity=name.encode(), options=options)


def _ping(channel: Channel) -> None:
    channel.send(Heartbeat(msgid=f"from-{channel.identity.decode()}", timestamp=1.0))


def _received(server: Channel, deadline_ms: int) -> list[bytes]:
    """Identities of everything that reaches ``server`` before the deadline."""
    seen: list[bytes] = []
    end = time.monotonic() + deadline_ms / 1000
    while (left := end - time.monotonic()) > 0:
        if server.poll(int(left * 1000) + 1):
            identity, _frames, _message = server.recv()
            seen.append(identity)
    return seen


@pytest.mark.parametrize("role", ["frontend", "backend", "admin", "publisher"])
def test_only_the_roles_own_keys_get_through(keys: Keys, guard: security.Guard, role: str) -> None:
    server = _server(keys.server_settings(), role)
    right = getattr(keys, ROLE_PEER[role])
    other_role = keys.worker if ROLE_PEER[role] != "worker" else keys.client
    peers = {
        "wrong": _peer(server.address, keys.peer_settings(keys.stranger), "wrong"),
        "other-role": _peer(server.address, keys.peer_settings(other_role), "other-role"),
        "plain": _peer(server.address, None, "plain"),
        # The right client key, but the server's key is an impostor's: no handshake.
        "wrong-server": _peer(
            server.address,
            keys.peer_settings(right, server_public=keys.stranger[0]),
            "wrong-server",
        ),
    }
    try:
        for peer in peers.values():
            _ping(peer)
        assert _received(server, REFUSED_DEADLINE_MS) == []
        good = _peer(server.address, keys.peer_settings(right), "good")
        peers["good"] = good
        _ping(good)
        assert server.poll(10_000), f"the right key got nothing through to the {role} socket"
        identity, _frames, message = server.recv()
        assert (identity, message.msgid) == (b"good", "from-good")
        # Still nothing from the refused peers.
        assert _received(server, 300) == []
    finally:
        for peer in peers.values():
            peer.close()
        server.close()


def test_job_manager_with_a_wrong_key_receives_nothing(keys: Keys, guard: security.Guard) -> None:
    backend = _server(keys.server_settings(), "backend")
    impostor = _peer(backend.address, keys.peer_settings(keys.stranger), "jm-impostor")
    worker = _peer(backend.address, keys.peer_settings(keys.worker), "jm-good")
    job = Request(msgid="job-1", queue="default", body_text='["run",{}]')
    try:
        _ping(impostor)
        _ping(worker)
        assert backend.poll(10_000)
        assert backend.recv()[0] == b"jm-good"
        backend.send_to(b"jm-good", job)
        assert worker.poll(10_000)
        assert worker.recv()[2] == job
        # The router cannot even address the impostor: it never connected.
        with pytest.raises(zmq.ZMQError) as info:
            backend.send_to(b"jm-impostor", job)
        assert info.value.errno == zmq.EHOSTUNREACH
        assert not impostor.poll(REFUSED_DEADLINE_MS)
    finally:
        for channel in (impostor, worker, backend):
            channel.close()


def test_publisher_pub_socket_reaches_only_keyed_subscribers(
    keys: Keys, guard: security.Guard
) -> None:
    settings = keys.server_settings()
    pub = Channel(
        transport.PUB,
        bind="tcp://127.0.0.1:*",
        options=security.secure_channel_options(settings, "publisher", security.SERVER),
    )
    subs: dict[str, Channel] = {}
    for name, peer_settings in (
        ("good", keys.peer_settings(keys.client)),
        ("wrong", keys.peer_settings(keys.stranger)),
        ("plain", None),
    ):
        options = (
            {}
            if peer_settings is None
            else security.secure_channel_options(peer_settings, "publisher", security.CLIENT)
        )
        sub = Channel(transport.SUB, connect=pub.address, options=options)
        sub.socket.setsockopt(transport.SUBSCRIBE, b"")
        subs[name] = sub
    try:
        # A SUB joins late: publish until the keyed one hears something.
        def heard() -> bool:
            pub.send_frames([b"topic", b"event"])
            return subs["good"].poll(20)

        wait_for(heard, 10.0, "the keyed subscriber to receive an event")
        assert subs["good"].recv_frames() == [b"topic", b"event"]
        pub.send_frames([b"topic", b"event"])
        assert not subs["wrong"].poll(REFUSED_DEADLINE_MS)
        assert not subs["plain"].poll(0)
    finally:
        for sub in subs.values():
            sub.close()
        pub.close()


def test_refusals_are_logged_once_per_address_and_reason(
    keys: Keys, guard: security.Guard, caplog: pytest.LogCaptureFixture
) -> None:
    server = _server(keys.server_settings(), "frontend")
    caplog.set_level(logging.DEBUG, logger="django_eventmq.security")
    wrong = [
        _peer(server.address, keys.peer_settings(keys.stranger), f"wrong-{n}") for n in range(3)
    ]
    try:
        for peer in wrong:
            _ping(peer)
        wait_for(
            lambda: sum("(again)" in r.getMessage() for r in caplog.records) >= 2,
            10.0,
            "three refusals",
        )
        warnings = [
            r.getMessage()
            for r in caplog.records
            if r.levelno == logging.WARNING and r.name == "django_eventmq.security"
        ]
        assert warnings == ["frontend: connection from 127.0.0.1 refused: public key not allowed"]
    finally:
        for peer in wrong:
            peer.close()
        server.close()


def test_server_options_need_a_running_guard(keys: Keys) -> None:
    # Without a ZAP handler ZeroMQ would accept any client key: refuse to build the socket.
    with pytest.raises(ConfigurationError, match=r"no security\.Guard serves it"):
        security.secure_channel_options(keys.server_settings(), "frontend", security.SERVER)


def test_guard_per_role_separates_two_routers_in_one_process(keys: Keys) -> None:
    """Two routers with different client lists share the process's ZAP thread
    but not their domains."""
    a_settings = keys.server_settings()
    b_settings = keys.server_settings(CURVE_FRONTEND_CLIENTS=[keys.stranger[0]])
    with security.Guard(a_settings, ["frontend"]), security.Guard(b_settings, ["frontend"]):
        a, b = _server(a_settings, "frontend"), _server(b_settings, "frontend")
        peers = [
            _peer(a.address, keys.peer_settings(keys.stranger), "s-to-a"),
            _peer(b.address, keys.peer_settings(keys.stranger), "s-to-b"),
        ]
        try:
            for peer in peers:
                _ping(peer)
            assert b.poll(10_000) and b.recv()[0] == b"s-to-b"
            assert not a.poll(REFUSED_DEADLINE_MS)
        finally:
            for channel in (*peers, a, b):
                channel.close()


def test_guard_restarts_after_stop(keys: Keys) -> None:
    settings = keys.server_settings()
    for _ in range(3):
        with security.Guard(settings, ["frontend"]) as g:
            assert g.active
            server = _server(settings, "frontend")
            peer = _peer(server.address, keys.peer_settings(keys.client), "again")
            try:
                _ping(peer)
                assert server.poll(10_000)
            finally:
                peer.close()
                server.close()


def test_plain_settings_need_no_guard_and_add_only_maxmsgsize() -> None:
    from django_eventmq.runtime.settings import Settings

    plain = Settings(admin_local_only=False)
    for role in security.ROLES:
        for side in (security.SERVER, security.CLIENT):
            options: dict[int, Any] = security.secure_channel_options(plain, role, side)
            assert options == {transport.MAXMSGSIZE: plain.max_message_bytes}
    assert not security.Guard(plain, security.ROLES).active
