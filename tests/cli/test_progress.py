"""Progress bars: the bar itself (no terminal needed), and long commands run under a
pseudo-terminal (the bar is drawn and completes) and into a pipe (no bar at all)."""

from __future__ import annotations

import io
import os
import pty
import re
import select
import subprocess
import sys
from collections.abc import Iterator

import pytest

from django_eventmq.cli import progressbar
from django_eventmq.cli.progressbar import ProgressBar
from django_eventmq.runtime import admin_client
from tests.support import ROOT, wait_for
from tests.system.ops.conftest import start_router

EMPTY = "[" + "." * progressbar.BAR_WIDTH + "]"
FULL = "[" + "#" * progressbar.BAR_WIDTH + "]"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_bar_fills_in_proportion():
    assert progressbar.bar(0, 10, width=10) == "[..........]"
    assert progressbar.bar(3, 10, width=10) == "[###.......]"
    assert progressbar.bar(12, 10, width=10) == "[##########]"  # more than planned: full
    assert progressbar.bar(5, None, width=4) == "[....]"  # no total: nothing to fill


def test_on_a_terminal_it_redraws_at_most_every_interval_and_ends_its_line():
    out = io.StringIO()
    clock = Clock()
    with ProgressBar(out, 200, label="rows", tty=True, every=1.0, clock=clock) as bar:
        bar.update(50)  # within the interval of the first drawing: not drawn
        clock.now = 1.0
        bar.update(100)
        bar.advance(100)  # not drawn either; finish() draws the end
    frames = out.getvalue().split("\r")[1:]
    assert frames == [
        f"{EMPTY}   0% 0/200 rows\x1b[K",
        f"{'[' + '#' * 15 + '.' * 15 + ']'}  50% 100/200 rows\x1b[K",
        f"{FULL} 100% 200/200 rows\x1b[K\n",
    ]


def test_elsewhere_it_writes_nothing():
    out = io.StringIO()
    with ProgressBar(out, 10, label="rows") as bar:  # StringIO is not a terminal
        bar.advance(10)
    assert out.getvalue() == ""
    assert bar.done == 10 and bar.finished


def test_without_a_total_it_counts():
    out = io.StringIO()
    bar = ProgressBar(out, None, label="jobs", tty=True)
    bar.update(1234, force=True)
    assert out.getvalue() == f"\r{EMPTY} 1,234 jobs\x1b[K"


# -- commands under a pseudo-terminal ---------------------------------------------


def run(args: list[str], env: dict[str, str], *, terminal: bool, timeout: float = 120) -> str:
    """Run ``args`` with stdout and stderr on a pseudo-terminal (or a pipe); all it wrote."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    if not terminal:
        done = subprocess.run(
            args, capture_output=True, text=True, env=full_env, cwd=ROOT, timeout=timeout
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + done.stderr
    master, slave = pty.openpty()
    popen = subprocess.Popen(args, stdout=slave, stderr=slave, env=full_env, cwd=ROOT)
    os.close(slave)
    seen = bytearray()

    def finished() -> bool:
        while select.select([master], [], [], 0.05)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer has gone
                return popen.poll() is not None
            if not chunk:
                return popen.poll() is not None
            seen.extend(chunk)
        return popen.poll() is not None and not select.select([master], [], [], 0)[0]

    try:
        wait_for(finished, timeout, f"{args[2:4]} to finish on a terminal")
    finally:
        if popen.poll() is None:
            popen.kill()
        popen.wait(10)
        os.close(master)
    text = seen.decode(errors="replace")
    assert popen.returncode == 0, text
    return text


def manage(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "manage.py"), *args]


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A migrated SQLite file the commands (subprocesses) share; the env that selects it."""
    path = tmp_path_factory.mktemp("progress") / "db.sqlite3"
    env = {
        "DJANGO_SETTINGS_MODULE": "tests.system.ops.sqlite_settings",
        "EMQ_TEST_SQLITE": str(path),
    }
    run(manage("migrate", "-v", "0"), env, terminal=False, timeout=300)
    return env


AGED_ROWS = """
import datetime as dt
from django.utils import timezone
from django_eventmq.result_recording import record_results
from django_eventmq.models.results import JobResult
record_results([{"msgid": f"old-{n}", "queue": "default", "job": "shop.jobs.x", "args": [],
    "kwargs": {}, "status": "succeeded", "value": n, "error": None, "attempt": 1,
    "jobmanager": "jm", "pid": 1, "started": None, "finished": None} for n in range(ROWS)])
JobResult.objects.update(updated=timezone.now() - dt.timedelta(days=30))
"""


def aged_results(env: dict[str, str], n: int) -> None:
    run(manage("shell", "-c", AGED_ROWS.replace("ROWS", str(n))), env, terminal=False)


def test_purge_draws_a_bar_on_a_terminal_that_completes(database):
    aged_results(database, 600)
    text = run(
        manage("emq_purge_results", "--older-than", "7d", "--chunk-size", "50"),
        database,
        terminal=True,
    )
    frames = text.split("\r")
    assert f"{EMPTY}   0% 0/600 job results deleted\x1b[K" in frames
    assert any(
        frame.startswith(f"{FULL} 100% 600/600 job results deleted\x1b[K") for frame in frames
    )
    assert "so far" not in text  # the bar replaces the line per chunk
    assert re.search(r"\ndeleted 600 job results last updated before ", text.replace("\r\n", "\n"))


def test_purge_into_a_pipe_prints_plain_lines_and_no_bar(database):
    aged_results(database, 120)
    text = run(
        manage("emq_purge_results", "--older-than", "7d", "--chunk-size", "50"),
        database,
        terminal=False,
    )
    assert "\r" not in text and "\x1b" not in text
    assert text.splitlines()[:3] == [
        "deleted 50 job results so far",
        "deleted 100 job results so far",
        "deleted 120 job results so far",
    ]
    assert text.splitlines()[-1].startswith("deleted 120 job results last updated before ")


@pytest.fixture
def router() -> Iterator[tuple[str, str]]:
    """A router with no job manager (the jobs wait): its frontend and admin addresses."""
    proc, (frontend, _backend, admin) = start_router()
    try:
        yield frontend, admin
    finally:
        proc.stop()


def test_bulk_enqueue_draws_a_bar_on_a_terminal_that_completes(database, router):
    frontend, admin = router
    env = {**database, "EMQ_BROKER_ADDR": frontend}
    text = run(manage("enqueue_samples", "--count", "50"), env, terminal=True)
    frames = text.split("\r")
    assert f"{EMPTY}   0% 0/100 jobs queued\x1b[K" in frames
    assert any(frame.startswith(f"{FULL} 100% 100/100 jobs queued\x1b[K") for frame in frames)
    assert "Queued 50 welcome e-mails and 50 reports." in text

    def received() -> dict[str, int]:
        answer = admin_client.ask(admin, "STATUS", 5.0)
        return dict(answer.get("received_messages_by_queue", {}))

    wait_for(lambda: received() == {"email": 50, "reports": 50}, 30, "the router got them all")


def test_the_spark_reporter_draws_the_same_bar_on_a_terminal():
    from django_eventmq.contrib.spark.progress import Progress, ProgressReporter

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Terminal()
    reporter = ProgressReporter(None, "group", True, 1.0, stream=out)  # type: ignore[arg-type]
    reporter._show(Progress(2, 4, {"q": [10, 8, 0]}, 2.0))
    reporter.finished({}, 3.0)
    half = "[" + "#" * 15 + "." * 15 + "]"
    assert out.getvalue() == (
        f"\r{half} partitions 2/4; q 10 sent/8 acked/0 rejected; 4 jobs/s\x1b[K"
        f"\r{FULL} done; nothing acknowledged yet; 0 jobs/s\x1b[K\n"
    )
