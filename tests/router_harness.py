"""Fixtures for tests that drive our router in a thread: a ZeroMQ context, routers, raw peers.

Registered for every test directory by tests/conftest.py (router and client tests use them)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import zmq

from tests.router.test_router import Harness, make_settings


@pytest.fixture
def zctx() -> Iterator[zmq.Context[Any]]:
    ctx: zmq.Context[Any] = zmq.Context()
    yield ctx
    ctx.term()


@pytest.fixture
def start_router(zctx: zmq.Context[Any]) -> Iterator[Callable[..., Harness]]:
    """Our router in a thread (journal in memory unless overridden), with raw peers."""
    made: list[Harness] = []

    def start(**overrides: Any) -> Harness:
        harness = Harness(zctx, make_settings(**overrides))
        made.append(harness)
        return harness

    yield start
    for harness in made:
        harness.close()
