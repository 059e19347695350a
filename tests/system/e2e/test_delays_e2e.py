"""Delays and kept options end to end: a router and a job manager as real processes.

A job sent with ``countdown=2`` starts no earlier than the ``delay-until``
its REQUEST carried (read back from the router's journal, where the
guaranteed job is stored before ``send`` returns) and does run; a job sent
with ``.send(headers=...)`` keeps the decorator's ``timeout`` and is killed
at it. Jobs that fell due before the only job manager started (Django processes)
wait for its first worker process only, not for all of them.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from django_eventmq.errors import JobError
from django_eventmq.protocol import Headers, parse_headers
from django_eventmq.protocol.status import JobStatus
from tests.support import ROOT, Proc, migrated_env, tcp_addr, wait_for
from tests.system.e2e.delay_jobs import note_start, stall
from tests.system.e2e.stack import DjangoStack, RouterStack, client_of, running, serving

JOB_MODULE = "tests.system.e2e.delay_jobs"


@pytest.fixture
def stack(tmp_path: Path, eventmq_settings: Any) -> Iterator[Path]:
    """A router and a job manager (2 workers); yields the router's journal file."""
    with serving(RouterStack(tmp_path, JOB_MODULE), eventmq_settings) as s:
        s.start_jobmanager()
        yield s.journal


def _stored_headers(journal: Path, msgid: str) -> Headers:
    """The header frame the router stored for ``msgid`` (as the client sent it)."""
    db = sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=10)
    try:
        row = db.execute("SELECT headers FROM jobs WHERE msgid = ?", (msgid,)).fetchone()
    finally:
        db.close()
    assert row is not None, f"job {msgid} is not in the journal"
    raw = row[0]
    return parse_headers(raw.decode() if isinstance(raw, bytes) else raw)


def _noted_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _noted(path: Path, what: str) -> list[float]:
    return [float(line.split()[1]) for line in _noted_lines(path) if line.split()[0] == what]


def test_countdown_job_starts_no_earlier_than_its_due_time_and_runs(stack, tmp_path):
    out = tmp_path / "started"
    handle = note_start.send((str(out),), countdown=2)
    # guarantee: send returned after the router stored it, so the row is there
    # (two seconds before it is due).
    due = _stored_headers(stack, handle).delay_until
    assert due is not None
    assert handle.wait(timeout=60) == "ran"
    [started] = wait_for(lambda: _noted(out, "start"), 10, what="the job's start")
    assert started >= due


def test_send_with_headers_keeps_the_decorators_timeout(stack, tmp_path):
    out = tmp_path / "stall"
    handle = stall.send((str(out), 120), headers=Headers(priority=3))
    with pytest.raises(JobError) as raised:
        handle.wait(timeout=60)
    assert raised.value.exc_type == "TimeoutError"
    assert handle.status == JobStatus.TIMED_OUT
    assert len(_noted(out, "start")) == 1
    assert _noted(out, "done") == []


class LateJobManager(DjangoStack):
    """A router as ``python -m django emq_router``; the test starts the job manager later."""

    def __init__(self, tmp: Path) -> None:
        self.db = tmp / "db.sqlite3"
        self.journal = tmp / "journal.sqlite3"
        self.frontend, self.backend, admin = tcp_addr(), tcp_addr(), tcp_addr()
        self.env = migrated_env(
            {
                "DJANGO_SETTINGS_MODULE": "tests.system.e2e.retry_settings",
                "EMQ_RETRY_DB": str(self.db),
                "EMQ_JOURNAL_PATH": str(self.journal),
                "PYTHONPATH": str(ROOT),
            }
        )
        self.procs: list[Proc] = []
        ports = ("--frontend", self.frontend, "--backend", self.backend, "--admin", admin)
        self._start("emq_router", *ports).wait_output(r"router ready")
        self.router_up = time.monotonic()

    def workers(self, jobmanager: Proc, count: int) -> dict[int, float]:
        """Creation time (unix) of each of the ``count`` worker processes of ``jobmanager``."""

        def found() -> dict[int, float] | None:
            kids = {}
            for kid in psutil.Process(jobmanager.pid).children():
                with contextlib.suppress(psutil.Error):  # one that just exited
                    if "spawn_main" in " ".join(kid.cmdline()):
                        kids[kid.pid] = kid.create_time()
            return kids if len(kids) >= count else None

        return wait_for(found, 60, f"{count} worker processes")  # type: ignore[no-any-return]


def _reached(moment: float) -> Callable[[], bool]:
    return lambda: time.monotonic() >= moment


def test_countdown_jobs_due_while_a_job_manager_starts_wait_only_for_its_first_worker(
    tmp_path: Path, eventmq_settings: Any
) -> None:
    """Issue 30: jobs due before the only job manager is up start once its first worker
    process is: it starts that one alone (four starting together on two cores all came
    up after twice the time of one, or worse under load, and every job waited for them)."""
    with running(LateJobManager(tmp_path)) as stack, client_of(stack, eventmq_settings):
        sent = []  # (handle, due time, where it notes its start)
        for i in range(5):  # over 1.2 s, as a site's first requests
            wait_for(_reached(stack.router_up + 0.3 * i), 10, "the next send")
            out = tmp_path / f"started-{i}"
            handle = note_start.send((str(out),), countdown=2)
            due = _stored_headers(stack.journal, handle).delay_until
            assert due is not None
            sent.append((handle, due, out))
        wait_for(_reached(stack.router_up + 3), 10, "the router up 3 s")
        launched = time.time()
        jobmanager = stack._start(
            "emq_jobmanager", "--broker", stack.backend, "--concurrency", "4",
            "--job-module", JOB_MODULE,
        )  # fmt: skip
        wait_for(lambda: "jobmanager connected" in jobmanager.output(), 60, "the connection")
        connected = time.time()
        for handle, _, _ in sent:
            assert handle.wait(timeout=90) == "ran"
        # psutil's creation times count from the boot time in whole seconds: up to 1 s
        # off the wall clock the jobs note. Put them on it by the job manager's own.
        offset = psutil.Process(jobmanager.pid).create_time() - launched
        workers = {pid: at - offset for pid, at in stack.workers(jobmanager, 4).items()}
    runs = [(due, [line.split() for line in _noted_lines(out)]) for _, due, out in sent]
    assert all(len(noted) == 1 for _, noted in runs), runs  # each ran, once
    starts = [(due, float(at), int(pid)) for due, [[_, at, pid]] in runs]
    _, first, pid = min(starts, key=lambda start: start[1])
    first_up = workers[pid]  # created then; up just before it ran the first job
    facts = (
        f"(due, start, pid): {starts}; job manager launched {launched}, connected "
        f"{connected}; workers created {workers}\n{stack.logs()}"
    )
    assert all(at >= due for due, at, _ in starts), facts
    # Every job waited for the first worker up (or its due time), no longer.
    assert all(at <= max(due, first) + 1.0 for due, at, _ in starts), facts
    # A generous bound on that wait: one worker starts in about the time the job manager
    # took to start (the same imports); four together took three times that under load.
    assert first - connected <= 2 * (connected - launched) + 1.0, facts
    # The other workers started only once the first was (nearly) up: none shared the
    # CPU with it (before, all four started together, within 0.1 s).
    others = [created for other, created in workers.items() if other != pid]
    assert min(others) >= first_up + 0.5 * (first - first_up), facts
