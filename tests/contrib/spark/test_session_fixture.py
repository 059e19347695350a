"""The shared Spark session is replaced after a test that broke it (sessions.py).

Before, one test cut off by its timeout inside a Py4J call made every later
Spark test fail with errors that did not name it ("SparkSession does not exist
in the JVM", ``KeyError('c')``): the answer to the interrupted call was read
as the answer to the next one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.contrib.spark.sessions import SparkSessions, interrupted_in_py4j
from tests.support import ROOT


def raised_in(filename: str, error: BaseException) -> BaseException:
    """``error`` as raised by code in ``filename`` (its traceback has that frame)."""
    code = compile("raise error", filename, "exec")
    try:
        exec(code, {"error": error})
    except BaseException as raised:
        return raised
    raise AssertionError("not raised")


class Py4JJavaError(Exception):
    """Named as py4j's: a Java exception the JVM reported, the connection in step."""


class Fake:
    """Sessions that start numbered, break on demand, and record being killed."""

    def __init__(self) -> None:
        self.started: list[int] = []
        self.killed = 0
        self.broken: set[int] = set()
        self.fail_start: Exception | None = None

    def start(self) -> int:
        if self.fail_start is not None:
            raise self.fail_start
        self.started.append(len(self.started) + 1)
        return self.started[-1]

    def check(self, session: int) -> str | None:
        return "the Spark JVM is gone (exit code -9)" if session in self.broken else None

    def kill(self) -> None:
        self.killed += 1

    def sessions(self, restarts: int = 2) -> SparkSessions:
        return SparkSessions(self.start, check=self.check, kill=self.kill, restarts=restarts)


def test_a_session_found_broken_after_a_test_is_replaced_for_the_next() -> None:
    fake = Fake()
    sessions = fake.sessions()
    assert sessions.get("t1") == 1
    sessions.after("t1", None)
    assert sessions.get("t2") == 1  # fine: the same one
    fake.broken.add(1)
    sessions.after("t2", AssertionError("a test's own failure"))
    assert fake.killed == 1
    assert sessions.get("t3") == 2
    assert sessions.first_broken == "t2: the Spark JVM is gone (exit code -9)"


def test_an_error_raised_inside_a_py4j_call_breaks_the_session_without_asking_it() -> None:
    fake = Fake()
    sessions = fake.sessions()
    sessions.get("t1")
    cut = raised_in(f"{os.sep}x{os.sep}py4j{os.sep}clientserver.py", KeyboardInterrupt())
    assert interrupted_in_py4j(cut) == "KeyboardInterrupt inside a Py4J call: "
    sessions.after("t1", cut)  # check() would say it is fine: it must not be asked
    assert (fake.killed, sessions.get("t2")) == (1, 2)
    # A Java exception the JVM reported leaves the connection in step.
    java = raised_in(f"{os.sep}x{os.sep}py4j{os.sep}protocol.py", Py4JJavaError("boom"))
    assert interrupted_in_py4j(java) is None
    assert interrupted_in_py4j(raised_in("test_x.py", KeyboardInterrupt())) is None


def test_when_a_new_session_cannot_start_the_rest_skip_naming_the_first_breakage() -> None:
    fake = Fake()
    sessions = fake.sessions()
    sessions.get("t1")
    fake.broken.add(1)
    sessions.after("t1", None)
    fake.fail_start = RuntimeError("no JVM")
    with pytest.raises(RuntimeError, match="no JVM"):  # that test errors with the cause
        sessions.get("t2")
    with pytest.raises(pytest.skip.Exception) as skipped:
        sessions.get("t3")
    assert str(skipped.value) == (
        "no Spark session: it broke in t1: the Spark JVM is gone (exit code -9); "
        "starting a new one failed: RuntimeError('no JVM')"
    )


def test_a_session_that_keeps_breaking_is_given_up_naming_the_first_breakage() -> None:
    fake = Fake()
    sessions = fake.sessions(restarts=1)
    for test in ("t1", "t2"):
        fake.broken.add(sessions.get(test))
        sessions.after(test, None)
    with pytest.raises(pytest.skip.Exception) as skipped:
        sessions.get("t3")
    assert str(skipped.value) == (
        "the Spark session broke 2 times, first in t1: the Spark JVM is gone (exit code -9)"
    )
    assert fake.started == [1, 2]


#: The inner run needs none of these (Django, workers, a cache in the checkout).
PLUGINS_OFF = ["-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:django"]

#: Spark tests in a pytest run of their own, with the ``spark`` fixture of this
#: directory: one is cut off by its timeout in the middle of a Spark job, and the
#: next needs a working session; the last kills the JVM, which the check finds.
INNER = """
import time

import pytest


def test_0_starts_the_session(spark):
    assert spark.range(3).count() == 3


@pytest.mark.timeout(4)
def test_1_cut_off_by_its_timeout(spark):
    # Longer than the timeout, not for ever: the interrupted call's answer comes later
    # (a job that never ends would hold the test: pyspark's clean-up after the
    # interrupt waits for that answer, so every second here is waited for). The
    # call starts as the test does, so any sleep past the timeout is cut inside it.
    spark.sparkContext.parallelize([1], 1).map(lambda x: time.sleep(10) or x).collect()


def test_2_gets_a_working_session(spark):
    assert spark.range(7).count() == 7
    assert [row.c for row in spark.createDataFrame([(1, "x")], ["a", "c"]).collect()] == ["x"]


def test_3_a_killed_jvm_is_found(spark):
    from pyspark import SparkContext

    from tests.contrib.spark.sessions import session_problem

    assert session_problem(spark) is None
    SparkContext._gateway.proc.kill()
    SparkContext._gateway.proc.wait()
    assert session_problem(spark) == "the Spark JVM is gone (exit code -9)"
"""


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_after_a_timeout_in_a_spark_call_the_next_test_gets_a_working_session(
    tmp_path: Path,
) -> None:
    pytest.importorskip("pyspark", exc_type=ImportError)
    (tmp_path / "conftest.py").write_text("from tests.contrib.spark.conftest import *  # noqa\n")
    (tmp_path / "test_inner.py").write_text(INNER)
    env: dict[str, Any] = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-q", *PLUGINS_OFF],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    out = done.stdout + done.stderr
    assert "FAILED test_inner.py::test_1_cut_off_by_its_timeout - Failed: Timeout" in out, out
    for test in ("test_0_starts", "test_2_gets_a_working_session", "test_3_a_killed_jvm_is_found"):
        assert f"PASSED test_inner.py::{test}" in out, out
    assert "1 failed, 3 passed" in out, out
