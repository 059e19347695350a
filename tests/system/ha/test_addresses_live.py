"""Peers given several router addresses send only to the router that is up.

A router group's standby binds nothing, so a peer's connection to it never
completes. What ZeroMQ does with a message sent toward such an address
decides whether a job can wait there, unseen, until that member becomes the
leader (and then reaches it late, or twice). These tests show it on real
sockets: a DEALER without ``IMMEDIATE`` keeps messages for an address where
nobody listens and delivers them to whoever binds it later; with
``IMMEDIATE`` (our clients) nothing is queued there. Job managers take one
address at a time (``RouterLink``) and move on when it does not answer.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from django_eventmq.client.connection import Client
from django_eventmq.errors import ConfigurationError
from django_eventmq.jobmanager.link import RouterLink
from django_eventmq.runtime import transport
from django_eventmq.runtime.settings import Settings
from tests.support import Proc, tcp_addr, wait_for
from tests.system.chaos.support import admin_call, body, start_router

EARLY = 10


def _drain(channel: transport.Channel, into: list[list[bytes]]) -> int:
    """Read every message waiting on ``channel`` into ``into``; returns how many are there."""
    while channel.poll(0):
        into.append(channel.recv_frames())
    return len(into)


def _first_after_handshake(
    late: transport.Channel, dealer_send: Callable[[bytes], None], got: list[list[bytes]]
) -> list[bytes]:
    """Once ``late``'s connection from the dealer is up: fresh messages until one
    reaches it (the dealer shares them out); the first message ``late`` got.

    ZeroMQ delivers one connection's messages in order, so anything queued for
    this address earlier arrives before the first fresh one."""
    wait_for(lambda: late.peer_connected(), 10, "the dealer's connection to the late router")
    fresh = 0

    def arrived() -> bool:
        nonlocal fresh
        if _drain(late, got):
            return True
        dealer_send(f"fresh-{fresh}".encode())
        fresh += 1
        return False

    wait_for(arrived, 10, "a fresh message at the late router", poll=0.02)
    return got[0]


def test_zeromq_without_immediate_keeps_messages_for_an_address_nobody_listens_on() -> None:
    """Why IMMEDIATE matters: a plain DEALER queues for the dead address, and a
    router bound there later receives those stale messages."""
    dead, live = tcp_addr(), tcp_addr()
    with (
        transport.Channel(transport.ROUTER, bind=live) as router,
        transport.Channel(transport.DEALER, connect=[dead, live]) as dealer,
    ):
        for i in range(EARLY):
            dealer.send_frames([f"early-{i}".encode()])
        at_live: list[list[bytes]] = []
        wait_for(lambda: _drain(router, at_live) >= EARLY // 2, 10, "half at the live router")
        with transport.Channel(transport.ROUTER, bind=dead) as late:
            at_late: list[list[bytes]] = []
            wait_for(
                lambda: _drain(late, at_late) + _drain(router, at_live) >= EARLY,
                10,
                "every message at one router or the other",
            )
    assert len(at_late) == EARLY - len(at_live) > 0
    assert all(frames[1].startswith(b"early-") for frames in at_late)


def test_with_immediate_nothing_waits_for_an_address_nobody_listens_on() -> None:
    dead, live = tcp_addr(), tcp_addr()
    options = {transport.IMMEDIATE: 1, transport.SNDTIMEO: 5000}
    with (
        transport.Channel(transport.ROUTER, bind=live) as router,
        transport.Channel(transport.DEALER, connect=[dead, live], options=options) as dealer,
    ):
        early = [f"early-{i}".encode() for i in range(EARLY)]
        for message in early:
            dealer.send_frames([message])
        at_live: list[list[bytes]] = []
        wait_for(lambda: _drain(router, at_live) >= EARLY, 10, "every message at the live router")
        assert [frames[1] for frames in at_live] == early
        with transport.Channel(transport.ROUTER, bind=dead, watch_peer=True) as late:
            got: list[list[bytes]] = []
            first = _first_after_handshake(late, lambda m: dealer.send_frames([m]), got)
    assert first[1].startswith(b"fresh-"), f"a stale message reached the late router: {first}"


@pytest.mark.parametrize("addr", ["tcp://127.0.0.1:1,,tcp://127.0.0.1:2", "tcp://127.0.0.1:1,x"])
def test_a_client_refuses_a_bad_address_list_naming_the_setting(addr: str) -> None:
    with pytest.raises(ConfigurationError, match=r"^BROKER_ADDR: "):
        Client(addr)


@pytest.fixture
def router_a(tmp_path: Path) -> Iterator[tuple[Proc, str, str, str]]:
    frontend, backend, admin = tcp_addr(), tcp_addr(), tcp_addr()
    proc = start_router(frontend, backend, admin, tmp_path / "a.sqlite3")
    try:
        yield proc, frontend, backend, admin
    finally:
        proc.stop()


def test_a_client_given_a_dead_and_a_live_router_sends_to_the_live_one_only(
    router_a: tuple[Proc, str, str, str],
) -> None:
    """Jobs sent (guaranteed, so each is ACKed) go to the live router; a router
    started later at the first address receives none of them."""
    _proc, frontend, _backend, admin = router_a
    dead = tcp_addr()
    client = Client(f"{dead},{frontend}", send_timeout=5.0)
    try:
        msgids = [f"early-{i}-{os.getpid()}".encode() for i in range(200)]
        result = client.send_many(
            ((m, b"nobody-serves", b"guarantee", body(m.decode())) for m in msgids),
            ack_timeout=2.0,
        )
        assert result.acked == len(msgids) and result.resent == 0
        assert admin_call(admin, "MONITOR")["queued"] == len(msgids)
        with transport.Channel(transport.ROUTER, bind=dead, watch_peer=True) as late:
            got: list[list[bytes]] = []

            def send_fresh(marker: bytes) -> None:
                client.send_request_frames(marker, b"nobody-serves", b"", body("fresh"))

            first = _first_after_handshake(late, send_fresh, got)
        stale = [m for m in msgids for frames in got if m in b"".join(frames)]
        assert not stale, f"the late router got {len(stale)} earlier job(s), e.g. {stale[:3]}"
        assert b"fresh-" in b"".join(first)
    finally:
        client.close()


def test_a_job_manager_link_takes_one_address_at_a_time_and_moves_on(
    router_a: tuple[Proc, str, str, str], tmp_path: Path
) -> None:
    """First address dead: the link reaches the second; its router killed and
    another started at the first address: the link moves there. Prints the times."""
    proc_a, _frontend, backend_a, _admin = router_a
    dead = tcp_addr()
    settings = Settings(
        worker_addr=f"{dead},{backend_a}",
        heartbeat_interval=0.5,
        heartbeat_timeout=2.0,
        reconnect_max_delay=1.0,
    )
    poller = transport.FdPoller()
    link: RouterLink[object] = RouterLink(settings, poller)

    def turn() -> bool:
        poller.poll(20)
        now = time.monotonic()
        for _message in link.messages(now):
            pass
        link.keepalive(now)
        assert link.channel is None or "," not in link.channel.address  # one router at a time
        return link.connected

    try:
        started = time.monotonic()
        link.connect(started)
        wait_for(turn, 20, "the link to reach the second address", poll=0)
        to_second = time.monotonic() - started
        assert link.addr == backend_a
        os.kill(proc_a.pid, signal.SIGKILL)
        proc_a.popen.wait(10)
        killed = time.monotonic()
        frontend_b, admin_b = tcp_addr(), tcp_addr()
        router_b = start_router(frontend_b, dead, admin_b, tmp_path / "b.sqlite3")
        try:
            wait_for(lambda: not turn(), 20, "the link to notice its router is gone", poll=0)
            noticed = time.monotonic() - killed
            wait_for(turn, 20, "the link to reach the router at the first address", poll=0)
            to_b = time.monotonic() - killed
            assert link.addr == dead
            workers = admin_call(admin_b, "ROUTER_SHOW_WORKERS")["connected_workers"]
            assert len(workers) == 1
        finally:
            router_b.stop()
    finally:
        link.close()
    print(
        f"\njob manager link: first address dead -> connected to the second after "
        f"{to_second:.2f}s; its router SIGKILLed -> noticed after {noticed:.2f}s, "
        f"connected to the router started at the first address {to_b:.2f}s after the kill "
        f"(including that router's start)"
    )
