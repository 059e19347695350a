"""Fixtures of the lifecycle tests: a raw ROUTER playing the router, in this thread or another."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from django_eventmq.client import connection
from django_eventmq.protocol import Ack, Cancel, Message, Request, new_msgid
from django_eventmq.runtime import transport
from tests.support import receive_request

__all__ = ["ThreadRouter", "ack", "raw_broker", "receive_request"]


def ack(request: Request) -> Ack:
    """The ACK a router sends once it stored ``request``."""
    return Ack(msgid=new_msgid(), ack_msgid=request.msgid)


@pytest.fixture(autouse=True)
def _no_emq_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("EMQ_"):
            monkeypatch.delenv(key)


@contextmanager
def raw_broker(eventmq_settings: Any, **settings: Any) -> Iterator[transport.Channel]:
    """A raw ROUTER on a random loopback port, configured as BROKER_ADDR (and ``settings``);
    this process's client connections and the ROUTER closed afterwards."""
    channel = transport.Channel(transport.ROUTER, bind="tcp://127.0.0.1:*")
    try:
        eventmq_settings(BROKER_ADDR=channel.address, **settings)
        yield channel
    finally:
        connection.close_clients()
        channel.close()


@pytest.fixture
def broker(eventmq_settings: Any) -> Iterator[transport.Channel]:
    """A raw ROUTER on a random loopback port, configured as BROKER_ADDR (used in this thread)."""
    with raw_broker(eventmq_settings, ACK_TIMEOUT=0.3, ACK_RETRIES=2) as channel:
        yield channel


class ThreadRouter:
    """A raw ROUTER in its own thread that answers each REQUEST as ``answer`` says
    and keeps the REQUESTs and the msgids of the jobs CANCELs name.

    ``answer(request, count)`` returns the messages to send back to the client
    (``count`` is how many copies of that msgid arrived so far).
    """

    def __init__(self, answer: Callable[[Request, int], list[Message]]) -> None:
        self.answer = answer
        self.received: list[Request] = []
        self.cancelled: list[str] = []
        self.address = ""
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(10), "router thread did not start"

    def _run(self) -> None:
        channel = transport.Channel(transport.ROUTER, bind="tcp://127.0.0.1:*")
        try:
            self.address = channel.address
            self._ready.set()
            while not self._stop.is_set():
                if not channel.poll(20):
                    continue
                identity, _frames, message = channel.recv()
                if isinstance(message, Cancel):
                    self.cancelled.append(message.job_msgid)
                if not isinstance(message, Request):
                    continue
                self.received.append(message)
                count = sum(1 for r in self.received if r.msgid == message.msgid)
                for reply in self.answer(message, count):
                    channel.send_to(identity, reply)
        finally:
            channel.close()

    def requests(self) -> list[Request]:
        return list(self.received)

    def cancels(self) -> list[str]:
        return list(self.cancelled)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture
def thread_router(eventmq_settings: Any) -> Iterator[Callable[..., ThreadRouter]]:
    """Start a :class:`ThreadRouter` and point BROKER_ADDR at it."""
    started: list[ThreadRouter] = []

    def start(answer: Callable[[Request, int], list[Message]], **settings: Any) -> ThreadRouter:
        router = ThreadRouter(answer)
        started.append(router)
        eventmq_settings(BROKER_ADDR=router.address, **settings)
        return router

    yield start
    connection.close_clients()
    for router in started:
        router.stop()
