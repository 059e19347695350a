"""A client notices a router that stopped answering: ZMTP heartbeats on its socket.

Without them a half-open connection (the router's process frozen, its host
gone) looked up until TCP gave up, hours later, and ``.delay()`` went on
queueing jobs into it. With them ZeroMQ drops the connection after
``HEARTBEAT_TIMEOUT`` of silence, so ``.delay()`` finds no router connected
and says so (``BrokerUnavailable``), and reconnects once the router answers.
Shown with a real router process, frozen with SIGSTOP.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import zmq

from django_eventmq.client.connection import Client, client_options
from django_eventmq.client.pool import get_client
from django_eventmq.contrib.spark.sender import PipelinedSender
from django_eventmq.errors import BrokerUnavailable
from django_eventmq.runtime import config
from django_eventmq.runtime.settings import from_mapping
from tests.support import tcp_addr, wait_for
from tests.system.chaos.support import start_router

BODY = b'["run",{"path":"app.jobs","callable":"f","args":[],"kwargs":{}}]'


def test_a_client_socket_heartbeats_as_the_settings_say(tmp_path: Path, eventmq_settings) -> None:
    frontend, backend, admin = tcp_addr(), tcp_addr(), tcp_addr()
    router = start_router(frontend, backend, admin, tmp_path / "journal.sqlite3")
    try:
        eventmq_settings(BROKER_ADDR=frontend, HEARTBEAT_INTERVAL=2, HEARTBEAT_TIMEOUT=7)
        client = get_client(frontend)
        assert isinstance(client, Client)
        client.send_request_frames(b"m-1", b"default", b"", BODY)  # connected
        socket = client.channel.socket
        assert socket.getsockopt(zmq.HEARTBEAT_IVL) == 2000
        assert socket.getsockopt(zmq.HEARTBEAT_TIMEOUT) == 7000
        assert socket.getsockopt(zmq.HEARTBEAT_TTL) == 7000
        # A Spark executor's sender, made without Django, from its EMQ_* settings.
        settings = from_mapping({"HEARTBEAT_INTERVAL": 1, "HEARTBEAT_TIMEOUT": 4}, environ={})
        sender = PipelinedSender(frontend, settings=settings)
        try:
            assert sender.channel.socket.getsockopt(zmq.HEARTBEAT_IVL) == 1000
            assert sender.channel.socket.getsockopt(zmq.HEARTBEAT_TIMEOUT) == 4000
        finally:
            sender.close()
    finally:
        router.stop()


def test_a_client_drops_a_frozen_router_s_connection_and_comes_back(
    tmp_path: Path, eventmq_settings
) -> None:
    frontend, backend, admin = tcp_addr(), tcp_addr(), tcp_addr()
    router = start_router(frontend, backend, admin, tmp_path / "journal.sqlite3")
    settings = eventmq_settings(HEARTBEAT_INTERVAL=0.2, HEARTBEAT_TIMEOUT=1)
    client = Client(frontend, send_timeout=0.5, options=client_options(settings), watch_peer=True)
    try:
        client.send_request_frames(b"m-1", b"default", b"", BODY)
        wait_for(client.channel.peer_connected, 30, "the connection, seen by its monitor")
        router.signal(signal.SIGSTOP)  # TCP still up, nothing answers
        try:
            wait_for(
                lambda: client.channel.peer_connected() is False,
                30,
                "the client to drop the frozen router's connection",
            )
            # Nothing is queued toward a router that does not answer.
            with pytest.raises(BrokerUnavailable):
                client.send_request_frames(b"m-2", b"default", b"", BODY)
        finally:
            router.signal(signal.SIGCONT)
        wait_for(client.channel.peer_connected, 30, "the client to reconnect")
        client.send_request_frames(b"m-3", b"default", b"", BODY)
    finally:
        client.close()
        router.stop()
        config.reset()
