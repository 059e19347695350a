"""Publisher and consumer processes on loopback, and the events the consumers record.

Processes bind ``tcp://127.0.0.1:*`` and log the ports they got, so no other
process can take a port between our choosing and their binding. Every
process is stopped in teardown. A SUB socket only receives what is published
after its subscription reached the publisher, so :func:`wait_subscribed`
publishes a probe until a consumer has seen one, instead of sleeping.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from django_eventmq.pubsub.api import close_publish_clients, publish
from tests.support import Proc, python_module, wait_for

ANY_PORT = "tcp://127.0.0.1:*"
#: Topic of the probes that show a consumer's subscription is in place.
PROBE = "orders.probe"


@dataclass
class Publisher:
    proc: Proc
    incoming: str
    outgoing: str


def django_command(*args: str) -> tuple[list[str], dict[str, str]]:
    """Command line and environment of a management command run with this app installed."""
    return [sys.executable, "-m", "django", *args], {
        "DJANGO_SETTINGS_MODULE": "tests.pubsub.site_settings"
    }


def start_publisher(*options: str, django: bool = False) -> Publisher:
    """``python -m django_eventmq pubsub`` (or ``manage.py emq_pubsub``) on free ports."""
    addresses = ("--incoming", ANY_PORT, "--outgoing", ANY_PORT, *options)
    if django:
        args, env = django_command("emq_pubsub", *addresses)
    else:
        args, env = python_module("pubsub", *addresses), {}
    proc = Proc(args, env=env)
    try:
        ready = proc.wait_output(r"publisher ready: incoming=(\S+) outgoing=(\S+)")
    except BaseException:
        proc.stop()
        raise
    return Publisher(proc, ready.group(1), ready.group(2))


def start_consumer(outgoing: str, events: Path, *, django: bool = False) -> Proc:
    """A consumer running ``tests/pubsub/subscribers.py``, recording into ``events``.

    ``django=True`` runs ``manage.py emq_subscribe`` (the module is found by
    autodiscovery); otherwise ``python -m django_eventmq subscribe --subscriber-module``.
    """
    if django:
        args, env = django_command("emq_subscribe", "--connect", outgoing)
    else:
        args, env = (
            python_module(
                "subscribe",
                "--connect",
                outgoing,
                "--subscriber-module",
                "tests.pubsub.subscribers",
            ),
            {},
        )
    proc = Proc(args, env={**env, "EMQ_TEST_EVENTS": str(events)})
    try:
        proc.wait_output(r"subscriber ready: ")
    except BaseException:
        proc.stop()
        raise
    return proc


def read_events(path: Path) -> list[dict[str, Any]]:
    """The events a consumer recorded so far (probes left out)."""
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [event for event in lines if event["topic"] != PROBE]


def wait_events(
    path: Path, condition: Callable[[list[dict[str, Any]]], bool], what: str, timeout: float = 10
) -> list[dict[str, Any]]:
    """Wait until the recorded events satisfy ``condition``; return them."""
    events: list[dict[str, Any]] = wait_for(
        lambda: (found := read_events(path)) and condition(found) and found, timeout, what
    )
    return events


def wait_subscribed(incoming: str, events: Path, timeout: float = 10) -> None:
    """Publish probes to ``incoming`` until the consumer recording into ``events`` got one."""

    def probe_arrived() -> bool:
        publish(PROBE, {}, addr=incoming)
        return events.exists() and PROBE in events.read_text()

    wait_for(probe_arrived, timeout, f"a probe through {incoming} to reach the consumer")


@pytest.fixture
def publisher() -> Iterator[Publisher]:
    pub = start_publisher()
    try:
        yield pub
    finally:
        close_publish_clients()
        pub.proc.stop()


@pytest.fixture
def events(tmp_path: Path) -> Path:
    return tmp_path / "events.jsonl"


@pytest.fixture
def consumer(publisher: Publisher, events: Path) -> Iterator[Proc]:
    """A consumer process subscribed (probe received) to ``publisher``."""
    proc = start_consumer(publisher.outgoing, events)
    try:
        wait_subscribed(publisher.incoming, events)
        yield proc
    finally:
        proc.stop()
