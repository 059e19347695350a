"""The Spark session the Spark tests share, started again when a test broke it.

A test can leave the session unusable for every test after it:

- pytest-timeout's signal interrupts a Py4J call. The JVM still answers that
  call later, and each following call on this thread reads the answer to the
  one before: "SparkSession does not exist in the JVM", ``KeyError('c')``,
  wrong values, in test after test, none naming the timeout;
- the JVM died (killed, out of memory) or the test stopped the session.

So after each test the session is checked, and a broken one is torn down (its
JVM killed) and a new one started for the next test. When that fails, or the
session broke :attr:`SparkSessions.restarts` times, the remaining Spark tests
are skipped with a reason naming the test that broke it first.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable
from typing import Any

import pytest

#: Waiting longer for the check's answer than this, the connection is stuck.
CHECK_TIMEOUT = 30.0


def interrupted_in_py4j(error: BaseException | None) -> str | None:
    """Why ``error`` left the Py4J connection out of step, or None if it did not.

    An exception raised inside a Py4J call (a timeout's signal, a broken
    socket) leaves that call's answer unread. A Java exception the JVM reported
    (``Py4JJavaError``) is an answer like any other: the connection is fine.
    """
    if error is None or type(error).__name__ == "Py4JJavaError":
        return None
    tb = error.__traceback__
    while tb is not None:
        if f"{os.sep}py4j{os.sep}" in tb.tb_frame.f_code.co_filename:
            first_line = (str(error).strip().splitlines() or [""])[0]
            return f"{type(error).__name__} inside a Py4J call: {first_line}"
        tb = tb.tb_next
    return None


def session_problem(session: Any) -> str | None:
    """What is wrong with ``session`` (a dead JVM, a stopped context, a Py4J
    connection that answers out of step), or None when it works."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if gateway is None or (proc is not None and proc.poll() is not None):
        code = None if proc is None else proc.returncode
        return f"the Spark JVM is gone (exit code {code})"
    client = gateway._gateway_client
    # A connection left waiting for an old answer would block a check forever.
    conn = client.get_thread_connection() if hasattr(client, "get_thread_connection") else None
    sock = getattr(conn, "socket", None)
    if sock is not None:
        sock.settimeout(CHECK_TIMEOUT)
    token = uuid.uuid4().hex
    try:
        echoed = session._jvm.java.lang.String(token)  # a new Java String: a copy
        stopped = session._jsc.sc().isStopped()
    except Exception as exc:
        return f"the session does not answer: {type(exc).__name__}: {exc}"
    finally:
        if sock is not None and getattr(conn, "socket", None) is sock:
            sock.settimeout(None)
    if echoed != token:
        return f"Py4J answers out of step (asked to echo {token!r}, got {echoed!r})"
    if stopped:
        return "the SparkContext was stopped"
    return None


def kill_session() -> None:
    """Kill the JVM of the running session and forget it, so the next start is a new JVM.

    ``session.stop()`` would talk to a JVM that is gone or out of step, so the
    class-level state PySpark keeps is reset by hand.
    """
    from pyspark import SparkContext
    from pyspark.sql import SparkSession, SQLContext

    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait(60)
    if gateway is not None:
        with contextlib.suppress(Exception):  # its JVM is dead: only our side closes
            gateway.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None
    SparkContext._active_spark_context = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
    SQLContext._instantiatedContext = None


class SparkSessions:
    """The one Spark session of the Spark tests: :meth:`get` before a test, :meth:`after` it."""

    def __init__(
        self,
        start: Callable[[], Any],
        *,
        check: Callable[[Any], str | None] = session_problem,
        kill: Callable[[], None] = kill_session,
        restarts: int = 2,
    ) -> None:
        self._start, self._check, self._kill = start, check, kill
        self.restarts = restarts
        self.session: Any = None
        self.started = 0
        #: The first breakage: "<test id>: <why>".
        self.first_broken: str | None = None
        #: Set once the rest are skipped: the reason they give.
        self.given_up: str | None = None

    def get(self, test: str) -> Any:
        """The working session (started now if there is none), or skip saying why not."""
        if self.given_up:
            pytest.skip(self.given_up)
        if self.session is None:
            try:
                self.session = self._start()
            except BaseException as exc:
                self._kill()  # whatever part of a JVM started
                if self.first_broken:
                    why = f"it broke in {self.first_broken}; starting a new one failed"
                else:
                    why = f"starting it for {test} failed"
                self.given_up = f"no Spark session: {why}: {exc!r}"
                raise
            self.started += 1
        return self.session

    def after(self, test: str, error: BaseException | None) -> None:
        """Check the session after ``test`` (which raised ``error``, or None); a broken
        one is killed, for :meth:`get` to start another."""
        if self.session is None:
            return
        why = interrupted_in_py4j(error) or self._check(self.session)
        if why is None:
            return
        self._kill()
        self.session = None
        self.first_broken = self.first_broken or f"{test}: {why}"
        if self.started > self.restarts:
            self.given_up = (
                f"the Spark session broke {self.started} times, first in {self.first_broken}"
            )

    def close(self) -> None:
        """Stop the session at the end (kill it if it does not answer)."""
        if self.session is None:
            return
        if self._check(self.session) is None:
            self.session.stop()
        else:
            self._kill()
        self.session = None
