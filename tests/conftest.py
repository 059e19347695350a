"""Fixtures shared by every test directory.

Settings are cached by ``django_eventmq.runtime.config``; every test starts and
ends with a fresh cache, so a test that changed ``EVENTMQ`` or ``EMQ_*``
cannot leak into the next one. Client sockets a test opened are closed after it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from django_eventmq.client.pool import close_clients
from django_eventmq.pubsub import api
from django_eventmq.runtime import config
from django_eventmq.runtime.settings import Settings
from tests.keys import keys as keys
from tests.router_harness import start_router as start_router
from tests.router_harness import zctx as zctx

# The `process` marker (tests that start processes), added when collected.
pytest_plugins = ["tests.process_marks"]


def pytest_configure(config: pytest.Config) -> None:
    """Each run records its tests' durations: the next one hands the longest out
    first (tests/parallel.py)."""
    try:
        from tests.parallel import record
    except ImportError:  # no pytest-xdist: nothing to hand out
        return
    record(config)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` keeps the Spark tests, and the tests of a file that shares
    a module-scoped fixture, in one worker each (tests/parallel.py)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from tests.parallel import SuiteScheduling

    return SuiteScheduling(config, log)


@pytest.fixture(autouse=True)
def _reset_eventmq_config() -> Iterator[None]:
    """Forget cached settings around each test, and close client sockets after it."""
    config.reset()
    yield
    close_clients()
    api.close_publish_clients()
    config.reset()


@pytest.fixture(autouse=True)
def _restore_eventmq_logger() -> Iterator[None]:
    """Put the ``django_eventmq`` logger back as it was after each test: a command
    run in-process (``main([...])``) configures it (its own stderr handler, a level,
    no propagation), which would hide later tests' log lines from ``caplog``."""
    logger = logging.getLogger("django_eventmq")
    state = (list(logger.handlers), logger.level, logger.propagate)
    yield
    logger.handlers[:] = state[0]
    logger.setLevel(state[1])
    logger.propagate = state[2]


@pytest.fixture
def eventmq_settings(settings: Any) -> Callable[..., Settings]:
    """Set ``settings.EVENTMQ`` for this test: ``eventmq_settings(EAGER=True)``.

    Returns the resulting runtime settings. Restored after the test by
    pytest-django's ``settings`` fixture (which fires ``setting_changed``).
    """

    def apply(**values: Any) -> Settings:
        settings.EVENTMQ = {key.upper(): value for key, value in values.items()}
        config.reset()
        return config.get_settings()

    return apply


@pytest.fixture
def emq_env(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Set ``EMQ_*`` environment variables for this test: ``emq_env(QUEUES="a:1")``."""

    def apply(**values: str) -> None:
        for key, value in values.items():
            monkeypatch.setenv(f"EMQ_{key.upper()}", value)
        config.reset()

    return apply
