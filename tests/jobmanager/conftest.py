"""Fixtures of the job manager tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fake_router import FakeRouter


@pytest.fixture
def router() -> Iterator[FakeRouter]:
    """A fake router on loopback for the job manager under test to connect to."""
    fake = FakeRouter()
    yield fake
    fake.close()
