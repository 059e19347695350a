"""runtime.service: the run skeleton every process shares, with a fake service."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator

import pytest

from django_eventmq.runtime import transport
from django_eventmq.runtime.service import Service, run_service, stop_on_signals
from tests.support import wait_for


class FakeService(Service):
    """Records each step; stops itself after ``turns`` turns (or waits for a signal)."""

    label = "fake"
    log = logging.getLogger("django_eventmq.tests.fake")

    def __init__(self, turns: int | None = 3, *, fail_at: str = "") -> None:
        super().__init__()
        self.turns = turns
        self.fail_at = fail_at
        self.steps: list[str] = []
        self.turned = threading.Event()

    def _step(self, name: str) -> None:
        self.steps.append(name)
        if name == self.fail_at:
            raise {"start": OSError, "turn": transport.ContextTerminated}[name]()

    def start(self) -> None:
        self._step("start")

    def loop_once(self) -> None:
        self._step("turn")
        self.turned.set()
        if self.turns is not None and self.steps.count("turn") >= self.turns:
            self.stop()
        elif self.turns is None:
            threading.Event().wait(0.01)  # a poll timeout: the signal comes meanwhile

    def drain(self) -> None:
        self._step("drain")

    def close(self) -> None:
        self._step("close")

    def summary(self) -> str:
        return f": {self.steps.count('turn')} turns"


@pytest.fixture
def handlers() -> Iterator[dict[int, object]]:
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield saved
    for sig, handler in saved.items():
        signal.signal(sig, handler)  # type: ignore[arg-type]


def test_steps_run_in_order_and_the_stop_line_has_the_summary(
    handlers: dict[int, object], caplog: pytest.LogCaptureFixture
) -> None:
    service = FakeService(turns=3)
    with caplog.at_level(logging.INFO, "django_eventmq.tests.fake"):
        service.run()
    assert service.steps == ["start", "turn", "turn", "turn", "drain", "close"]
    assert caplog.messages[-1] == "fake stopped: 3 turns"


def test_stop_before_the_first_turn_still_starts_drains_and_closes(
    handlers: dict[int, object],
) -> None:
    service = FakeService()
    service.stop()
    run_service(service)
    assert service.steps == ["start", "drain", "close"]


def test_a_failing_start_still_closes_and_raises(handlers: dict[int, object]) -> None:
    service = FakeService(fail_at="start")
    with pytest.raises(OSError):
        service.run()
    assert service.steps == ["start", "close"]


def test_a_terminated_context_ends_the_run_without_the_drain(
    handlers: dict[int, object], caplog: pytest.LogCaptureFixture
) -> None:
    service = FakeService(fail_at="turn")
    with caplog.at_level(logging.INFO, "django_eventmq.tests.fake"):
        service.run()
    assert service.steps == ["start", "turn", "close"]
    assert "fake stopping: context terminated" in caplog.messages


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_run_gracefully_and_the_old_handler_comes_back(
    handlers: dict[int, object], sig: int
) -> None:
    before = signal.getsignal(sig)
    service = FakeService(turns=None)
    threading.Thread(
        target=lambda: (service.turned.wait(10), os.kill(os.getpid(), sig)), daemon=True
    ).start()
    service.run()
    assert service.steps[0] == "start" and service.steps[-2:] == ["drain", "close"]
    assert service.stopping
    assert signal.getsignal(sig) is before


def test_handlers_are_installed_for_the_run_only_and_in_the_main_thread_only(
    handlers: dict[int, object],
) -> None:
    before = signal.getsignal(signal.SIGTERM)
    calls: list[str] = []
    with stop_on_signals(lambda: calls.append("stop")):
        assert signal.getsignal(signal.SIGTERM) is not before
        os.kill(os.getpid(), signal.SIGTERM)
        wait_for(lambda: calls, 5, "stop() after SIGTERM")
    assert signal.getsignal(signal.SIGTERM) is before
    assert calls == ["stop"]

    # In another thread nothing is installed (signal.signal would raise there).
    service = FakeService(turns=2)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            service.run()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10)
    assert not thread.is_alive() and not errors
    assert service.steps == ["start", "turn", "turn", "drain", "close"]
    assert signal.getsignal(signal.SIGTERM) is before


def test_signals_can_be_left_alone(handlers: dict[int, object]) -> None:
    sentinel = signal.getsignal(signal.SIGTERM)
    seen: list[object] = []

    class Peek(FakeService):
        def start(self) -> None:
            seen.append(signal.getsignal(signal.SIGTERM))

    Peek(turns=1).run(signals=False)
    assert seen == [sentinel]
