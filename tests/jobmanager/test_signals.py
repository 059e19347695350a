"""The job manager on ``runtime.service``: one signal install per run, undone after; close always.

Run in this process's main thread (where Python delivers signals); a real
SIGTERM to this process stops the run.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from django_eventmq import __main__ as entry
from django_eventmq.errors import EventMQError
from django_eventmq.jobmanager.manager import JobManager
from django_eventmq.runtime.settings import Settings
from tests.fake_router import FakeRouter
from tests.jobs_fixtures.running import settings_for
from tests.support import wait_for

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@pytest.fixture
def installs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, Any]]]:
    """Every ``signal.signal`` call (still made), as (signal, handler); the old handlers after."""
    saved = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    calls: list[tuple[int, Any]] = []
    real = signal.signal

    def recording(sig: int, handler: Any) -> Any:
        calls.append((sig, handler))
        return real(sig, handler)

    monkeypatch.setattr(signal, "signal", recording)
    yield calls
    monkeypatch.undo()
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def _run_manager(settings: Settings) -> None:
    JobManager(settings, name="test-jm").run()


def _run_entry_point(settings: Settings) -> None:
    assert entry.run_jobmanager(settings, None) == 0


@pytest.mark.parametrize("run", [_run_manager, _run_entry_point], ids=["run", "python-m"])
def test_sigterm_stops_the_run_with_one_install_and_the_old_handlers_come_back(
    router: FakeRouter, installs: list[tuple[int, Any]], run: Callable[[Settings], None]
) -> None:
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}

    def terminate_once_installed() -> None:
        wait_for(lambda: signal.getsignal(signal.SIGTERM) is not before[signal.SIGTERM], 20)
        os.kill(os.getpid(), signal.SIGTERM)

    killer = threading.Thread(target=terminate_once_installed, daemon=True)
    killer.start()
    run(settings_for(router, concurrency=1, shutdown_grace=1.0))  # returns: SIGTERM stopped it
    killer.join(5)
    for sig in STOP_SIGNALS:
        ours = [handler for s, handler in installs if s == sig and handler is not before[sig]]
        assert len(ours) == 1, f"{signal.Signals(sig).name} installed {len(ours)} times"
        assert signal.getsignal(sig) is before[sig]


def test_a_failing_start_still_stops_the_children(
    router: FakeRouter, installs: list[tuple[int, Any]]
) -> None:
    jm = JobManager(settings_for(router, concurrency=2), name="test-jm")

    def refuse(now: float) -> None:
        raise EventMQError("no connection")

    jm.link.connect = refuse  # type: ignore[method-assign]  # start() connects after the spawn
    before = set(multiprocessing.active_children())
    with pytest.raises(EventMQError, match="no connection"):
        jm.run()
    assert jm.pool.children == {}
    assert set(multiprocessing.active_children()) == before  # both children were stopped
