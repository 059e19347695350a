"""Fixtures shared by the router tests: a ZeroMQ context, and routers in threads."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import zmq

from tests.core.test_router import Harness, make_settings


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
