"""The skeleton every long-running process shares: start, turn until stopped, close.

A process (router, job manager, scheduler, publisher, subscriber) provides
the steps; :func:`run_service` runs them in the same order for all:

1. SIGTERM and SIGINT are made to call ``stop()`` (main thread only: Python
   delivers signals there; the old handlers come back when the run ends);
2. ``start()`` (bind or connect; a failure still runs step 5);
3. ``loop_once()`` until ``stopping``: each process keeps its own timing
   (poll timeouts, heartbeats) inside its ``loop_once``;
4. ``drain()``: graceful work once stop was asked (finish running jobs);
5. ``close()`` always, then one "<label> stopped" line.

``stop()`` only sets a flag, so it is safe from signal handlers and other
threads. A terminated ZeroMQ context (tests, embedding) ends the run like a
stop, without the drain. Never imports Django.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Protocol

from django_eventmq.runtime import transport

#: The signals that ask a process to stop gracefully.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Runnable(Protocol):
    """What :func:`run_service` drives (:class:`Service` gives all but ``loop_once``)."""

    label: str
    log: logging.Logger

    @property
    def stopping(self) -> bool: ...

    def stop(self) -> None: ...

    def start(self) -> None: ...

    def loop_once(self) -> object: ...

    def drain(self) -> None: ...

    def close(self) -> None: ...

    def summary(self) -> str: ...


class Service:
    """Base of a process: the stop flag, no-op steps, and :meth:`run`.

    A subclass sets ``label`` and ``log``, implements :meth:`loop_once` (one
    turn with its own timeout) and overrides the steps it needs.
    """

    label: str = "service"
    log: logging.Logger = logging.getLogger("django_eventmq")

    def __init__(self) -> None:
        self._stopping = False

    @property
    def stopping(self) -> bool:
        return self._stopping

    def stop(self) -> None:
        """Ask the run to end. Only sets a flag: safe from signal handlers and threads."""
        self._stopping = True

    def start(self) -> None:
        """Bind or connect; called once before the first turn."""

    def loop_once(self) -> object:
        """One turn: wait (briefly) for work and do it."""
        raise NotImplementedError

    def drain(self) -> None:
        """Finish what must not be cut short, once stop was asked (default: nothing)."""

    def close(self) -> None:
        """Release sockets and files (idempotent); runs however the run ended."""

    def summary(self) -> str:
        """Said after "<label> stopped" (e.g. counts); empty by default."""
        return ""

    def run(self, *, signals: bool = True) -> None:
        """Run until :meth:`stop` (or SIGTERM/SIGINT with ``signals``): :func:`run_service`."""
        run_service(self, signals=signals)


def run_service(service: Runnable, *, signals: bool = True) -> None:
    """Run ``service`` through the steps in the module docstring."""
    with stop_on_signals(service.stop) if signals else contextlib.nullcontext():
        try:
            service.start()
            while not service.stopping:
                service.loop_once()
            service.drain()
        except transport.ContextTerminated:
            service.log.info("%s stopping: context terminated", service.label)
        finally:
            service.close()
            service.log.info("%s stopped%s", service.label, service.summary())


def install_signal_handlers(stop: Callable[[], None]) -> None:
    """Make SIGTERM and SIGINT call ``stop()`` (which should only set a flag)."""

    def handle(signum: int, frame: FrameType | None) -> None:
        stop()

    for sig in STOP_SIGNALS:
        signal.signal(sig, handle)


@contextlib.contextmanager
def stop_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    """SIGTERM/SIGINT call ``stop()`` inside the block, in the main thread only.

    Elsewhere (a service run in a thread) nothing is installed: Python runs
    handlers in the main thread only, and ``signal.signal`` would raise.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    install_signal_handlers(stop)
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
