"""Fixtures of the command-line tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.system.ops.conftest import start_router


@pytest.fixture(scope="module")
def router_admin() -> Iterator[str]:
    """The admin address of a real router (no group: it leads its shard alone)."""
    router, (_frontend, _backend, admin) = start_router()
    try:
        yield admin
    finally:
        router.stop()
