"""Fixtures of the job manager tests."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from django_eventmq.jobmanager.link import RouterLink
from django_eventmq.protocol import Features
from django_eventmq.runtime import transport
from tests.fake_router import FakeRouter
from tests.jobs_fixtures.running import settings_for
from tests.support import wait_for


@pytest.fixture
def router() -> Iterator[FakeRouter]:
    """A fake router on loopback for the job manager under test to connect to."""
    fake = FakeRouter()
    yield fake
    fake.close()


@pytest.fixture
def link(router: FakeRouter) -> Iterator[RouterLink[object]]:
    """A job manager's link to ``router``, connected, that read the router's FEATURES."""
    settings = settings_for(router, heartbeat_interval=1.0, heartbeat_timeout=30.0)
    link: RouterLink[object] = RouterLink(settings, transport.FdPoller())
    link.connect(time.monotonic())
    router.handshake(features=True)

    def answered() -> bool:
        for _message in link.messages(time.monotonic()):
            pass
        return link.session.send_bundle

    wait_for(answered, what="the link to read our FEATURES")
    router.expect(Features)
    yield link
    link.close()
