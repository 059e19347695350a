"""Autoscaling and warm restart (SIGHUP) seen from a real router and job manager
(``python -m django_eventmq router`` and ``jobmanager`` on loopback).

Jobs note ``start MSGID PID`` and ``done MSGID PID`` in a file and wait for a
gate file the test creates, so "busy" and "idle" are the test's to decide.
"""

from __future__ import annotations

import os
import re
import signal
import textwrap
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from django_eventmq.cli.admin_client import ask
from django_eventmq.client.connection import Client
from django_eventmq.protocol import Headers, Request, new_msgid
from django_eventmq.runtime.settings import Settings
from tests.fake_router import body
from tests.support import Proc, python_module, wait_for

ANY = "tcp://127.0.0.1:*"
GATED = "tests.jobs_fixtures.gated"


@dataclass
class Stack:
    admin: str
    frontend: str
    backend: str
    tmp: Path
    procs: list[Proc] = field(default_factory=list)
    client: Client | None = None

    @property
    def log(self) -> Path:
        return self.tmp / "jobs.log"

    @property
    def gate(self) -> Path:
        return self.tmp / "gate"

    def jobmanager(self, *args: str, env: dict[str, str] | None = None) -> Proc:
        proc = Proc(
            python_module(
                "jobmanager",
                "--broker",
                self.backend,
                "--prefetch",
                "0",
                "--log-level",
                "INFO",
                *args,
            ),
            env=env,
        )
        self.procs.append(proc)
        proc.wait_output(r"jobmanager connected", timeout=60)
        return proc

    def send(self, callable_name: str, path: str, gate: Path | None = None) -> str:
        if self.client is None:
            self.client = Client(self.frontend)
        msgid = new_msgid()
        self.client.send(
            Request(
                msgid=msgid,
                queue="default",
                headers=Headers(),
                body_text=body(
                    callable_name, str(self.log), msgid, str(gate or self.gate), path=path
                ),
            )
        )
        return msgid

    def lines(self, kind: str) -> list[tuple[str, int]]:
        """``(msgid, pid)`` of every ``kind`` ("start" or "done") line, in order."""
        if not self.log.exists():
            return []
        found = []
        for line in self.log.read_text().splitlines():
            word, msgid, pid = line.split()[:3]
            if word == kind:
                found.append((msgid, int(pid)))
        return found

    def processed(self) -> int:
        status = ask(self.admin, "STATUS", settings=Settings())
        counts = status["processed_messages_by_queue"]
        assert isinstance(counts, dict)
        return int(counts.get("default", 0))

    def held(self) -> int:
        """In-flight jobs + free slots the router keeps for the one job manager."""
        workers = ask(self.admin, "ROUTER_SHOW_WORKERS", settings=Settings())["connected_workers"]
        assert isinstance(workers, dict) and len(workers) == 1, workers
        (worker,) = workers.values()
        return int(worker["inflight"]) + int(worker["available_slots"])


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    router = Proc(
        python_module("router", "--frontend", ANY, "--backend", ANY, "--admin", ANY, "--no-journal")
    )
    ready = router.wait_output(r"router ready: frontend=(\S+) backend=(\S+) admin=(\S+)")
    frontend, backend, admin = ready.groups()
    s = Stack(admin, frontend, backend, tmp_path, [router])
    try:
        yield s
    finally:
        if s.client is not None:
            s.client.channel.close()
        for proc in reversed(s.procs):
            proc.stop()


def sizes(output: str) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in re.findall(r"autoscale: (\d+) -> (\d+) workers", output)]


def test_autoscale_grows_under_a_backlog_and_shrinks_back_when_idle(stack: Stack) -> None:
    jm = stack.jobmanager("--autoscale", "1,3", "--autoscale-idle", "0.5", "--job-module", GATED)
    assert "concurrency=1..3 (autoscale)" in jm.output()
    msgids = [stack.send("gated", GATED) for _ in range(8)]
    # A backlog of jobs that do not end: it grows to MAX (at once: the router
    # fills the slots of the children it could start).
    wait_for(lambda: len({pid for _, pid in stack.lines("start")}) == 3, 60, "3 children busy")
    wait_for(lambda: any(new == 3 for _, new in sizes(jm.output())), 10, "the -> 3 line")
    assert stack.held() == 3  # READY credit follows the size
    assert len(stack.lines("start")) == 3  # never more children than MAX
    stack.gate.touch()
    wait_for(lambda: stack.processed() == 8, 60, "8 jobs processed")
    wait_for(lambda: sizes(jm.output())[-1][1] == 1, 30, "shrunk back to MIN")
    changes = sizes(jm.output())
    assert changes[0][0] == 1
    assert all(1 <= new <= 3 for _, new in changes), changes
    assert max(new for _, new in changes) == 3
    wait_for(lambda: stack.held() == 1, 10, "one slot offered after shrinking")
    # Every job ran once.
    done = Counter(msgid for msgid, _ in stack.lines("done"))
    assert done == Counter(msgids)
    # It grows again for a new backlog (its one child started after the shrink is busy).
    stack.gate.unlink()
    more = [stack.send("gated", GATED) for _ in range(3)]
    wait_for(lambda: sizes(jm.output())[-1][0] == 1 < sizes(jm.output())[-1][1], 30, "grows again")
    stack.gate.touch()
    wait_for(lambda: stack.processed() == 11, 60, "11 jobs processed")
    assert Counter(m for m, _ in stack.lines("done")) == Counter(msgids + more)


def test_autoscale_starts_every_child_a_backlog_needs_at_once(stack: Stack) -> None:
    jm = stack.jobmanager(
        "--autoscale",
        "1,4",
        "--autoscale-idle",
        "0.5",
        "--job-module",
        GATED,
        "--log-level",
        "DEBUG",
    )
    msgids = [stack.send("gated", GATED) for _ in range(16)]
    # Four jobs run side by side, each in its own child.
    wait_for(lambda: len({pid for _, pid in stack.lines("start")}) == 4, 60, "4 children busy")
    assert len(stack.lines("start")) == 4
    # The children were started together: the last one before any grown one was up
    # (one at a time, each waited for the one before to be up).
    lines = jm.output().splitlines()
    first = next(i for i, line in enumerate(lines) if "started worker child" in line)
    started = [i for i, line in enumerate(lines) if "started worker child" in line][1:]
    up = [i for i, line in enumerate(lines) if re.search(r"worker child pid=\d+ up", line)]
    grown_up = [i for i in up if i > started[0]]
    assert len(started) == 3, lines[first:]
    assert started[-1] < grown_up[0], lines[first:]
    assert max(new for _, new in sizes(jm.output())) == 4
    stack.gate.touch()
    wait_for(lambda: stack.processed() == 16, 60, "16 jobs processed")
    assert Counter(m for m, _ in stack.lines("done")) == Counter(msgids)
    # Idle, it shrinks back to MIN as before, and offers one slot.
    wait_for(lambda: sizes(jm.output())[-1][1] == 1, 30, "shrunk back to MIN")
    wait_for(lambda: stack.held() == 1, 10, "one slot offered after shrinking")


def test_shrinking_never_stops_a_busy_child(stack: Stack, tmp_path: Path) -> None:
    jm = stack.jobmanager("--autoscale", "1,2", "--autoscale-idle", "0.3", "--job-module", GATED)
    opened = tmp_path / "open"
    opened.touch()
    long = stack.send("gated", GATED)  # waits for stack.gate
    wait_for(lambda: stack.lines("start"), 60, "the long job started")
    short = stack.send("gated", GATED, gate=opened)  # grows the pool, then ends at once
    wait_for(lambda: short in dict(stack.lines("done")), 60, "the short job done")
    wait_for(lambda: (2, 1) in sizes(jm.output()), 30, "shrunk to 1 while the long job runs")
    long_pid = dict(stack.lines("start"))[long]
    assert dict(stack.lines("start"))[short] != long_pid
    assert _alive(long_pid)
    stack.gate.touch()
    wait_for(lambda: stack.processed() == 2, 60, "both jobs processed")
    assert dict(stack.lines("done"))[long] == long_pid  # ran to its end in its child
    assert sizes(jm.output()) == [(1, 2), (2, 1)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--autoscale", "3,1"], "1 <= MIN <= MAX"),
        (["--autoscale", "0,2"], "1 <= MIN <= MAX"),
        (["--autoscale", "2"], "'MIN,MAX'"),
        (["--autoscale", "a,b"], "'MIN,MAX'"),
        (["--autoscale", "1,2", "--concurrency", "2"], "drop --concurrency for worker"),
        (["--autoscale-idle", "0"], "expected a number of seconds > 0"),
    ],
)
def test_bad_autoscale_options_are_refused(args: list[str], message: str) -> None:
    proc = Proc(python_module("jobmanager", "--broker", "tcp://127.0.0.1:1", *args))
    try:
        assert proc.popen.wait(60) == 2
        assert message in proc.output()
    finally:
        proc.stop()


def test_bad_autoscale_setting_says_how_to_fix() -> None:
    from django_eventmq.cli.options import settings_from_options
    from django_eventmq.errors import ConfigurationError
    from django_eventmq.runtime.settings import from_mapping

    with pytest.raises(ConfigurationError, match=r"AUTOSCALE: expected 'MIN,MAX'.*got '5,2'"):
        from_mapping({"AUTOSCALE": "5,2"})
    with pytest.raises(ConfigurationError, match="AUTOSCALE_IDLE"):
        from_mapping({"AUTOSCALE_IDLE": 0})
    assert from_mapping({"AUTOSCALE": "2,6"}).initial_workers == 2
    assert from_mapping({"CONCURRENCY": 3}).initial_workers == 3
    # --concurrency on the command line beats an AUTOSCALE setting; --autoscale sets it.
    base = from_mapping({"AUTOSCALE": "2,5"})
    fixed = settings_from_options(base, {"concurrency": 3})
    assert (fixed.autoscale_bounds, fixed.initial_workers) == (None, 3)
    assert settings_from_options(Settings(), {"autoscale": "1,4"}).autoscale_bounds == (1, 4)


MODULE = """
import os, time
from pathlib import Path
from django_eventmq.client.jobs import job

VERSION = {version}

@job
def gated(log, msgid, gate):
    pid = os.getpid()
    with open(log, "a") as f:
        f.write(f"start {{msgid}} {{pid}} {{VERSION}}\\n")
    deadline = time.monotonic() + 120
    while not Path(gate).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    with open(log, "a") as f:
        f.write(f"done {{msgid}} {{pid}} {{VERSION}}\\n")
    return VERSION
"""


def test_sighup_restarts_the_children_warm(stack: Stack, tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    module = code / "reloadjobs.py"
    module.write_text(textwrap.dedent(MODULE.format(version=1)))
    jm = stack.jobmanager(
        "--concurrency", "1", "--job-module", "reloadjobs", env={"PYTHONPATH": str(code)}
    )
    long = stack.send("gated", "reloadjobs")
    wait_for(lambda: stack.lines("start"), 60, "the long job started")
    ((_, old_pid),) = stack.lines("start")
    # New code on disk, then SIGHUP while the long job runs.
    module.write_text(textwrap.dedent(MODULE.format(version=2)))
    for stale in code.glob("__pycache__/*"):
        stale.unlink()
    jm.signal(signal.SIGHUP)
    jm.wait_output(r"reload: starting 1 new worker processes; 1 old ones finish", 30)
    # A job sent meanwhile runs at once in a new child, with the new code.
    opened = tmp_path / "open"
    opened.touch()
    after = stack.send("gated", "reloadjobs", gate=opened)
    wait_for(lambda: after in dict(stack.lines("done")), 60, "the new job done")
    assert long not in dict(stack.lines("done"))  # the long job still runs
    stack.gate.touch()
    wait_for(lambda: stack.processed() == 2, 60, "both jobs processed")
    wait_for(lambda: not _alive(old_pid), 30, "the old child exited")
    versions = {
        line.split()[1]: (int(line.split()[2]), line.split()[3])
        for line in stack.log.read_text().splitlines()
        if line.startswith("done")
    }
    assert versions[long] == (old_pid, "1")  # finished in its old child, old code
    assert versions[after][1] == "2" and versions[after][0] != old_pid
    done = Counter(msgid for msgid, _ in stack.lines("done"))
    assert done == Counter([long, after])
    assert "exited with code" not in jm.output()
    assert "failed to start" not in jm.output()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
