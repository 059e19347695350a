"""Autoscaling and warm restart (SIGHUP) seen from a real router and job manager
(``python -m django_eventmq router`` and ``jobmanager`` on loopback).

Jobs note ``start MSGID PID`` and ``done MSGID PID`` in a file and wait for a
gate file the test creates, so "busy" and "idle" are the test's to decide.
"""

from __future__ import annotations

import os
import re
import signal
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from django_eventmq.client.connection import Client
from django_eventmq.protocol import Headers, Request, new_msgid
from django_eventmq.runtime.admin_client import ask
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


#: Job code whose version a reload changes; each child notes when it imported it.
STAMPED = """
import atexit, os, time
from pathlib import Path
from django_eventmq.client.jobs import job

VERSION = {version}

with open({log!r}, "a") as f:
    f.write(f"import - {{os.getpid()}} {{VERSION}} {{time.monotonic()}}\\n")

if {slow_exit}:
    # Its processes take longer to exit than the job manager's EXIT_GRACE: slow,
    # held by no thread.
    atexit.register(time.sleep, 5.0)

@job
def gated(log, msgid, gate):
    pid = os.getpid()
    with open(log, "a") as f:
        f.write(f"start {{msgid}} {{pid}} {{VERSION}} {{time.monotonic()}}\\n")
    deadline = time.monotonic() + 120
    while not Path(gate).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    with open(log, "a") as f:
        f.write(f"done {{msgid}} {{pid}} {{VERSION}} {{time.monotonic()}}\\n")
    return VERSION
"""


@dataclass(frozen=True)
class Line:
    """A line of the stamped jobs' log: ``import``, ``start`` or ``done``."""

    kind: str
    msgid: str
    pid: int
    version: int
    at: float


def stamped(stack: Stack) -> list[Line]:
    if not stack.log.exists():
        return []
    return [
        Line(kind, msgid, int(pid), int(version), float(at))
        for kind, msgid, pid, version, at in (
            line.split() for line in stack.log.read_text().splitlines()
        )
    ]


def write_stamped(module: Path, stack: Stack, version: int, *, slow_exit: bool = False) -> None:
    module.write_text(STAMPED.format(version=version, log=str(stack.log), slow_exit=slow_exit))
    for stale in module.parent.glob("__pycache__/*"):
        stale.unlink()


def reloadable(
    stack: Stack, tmp_path: Path, concurrency: int, *args: str, slow_exit: bool = False
) -> tuple[Path, Proc]:
    """A job manager running the ``stampjobs`` module (version 1), and the module's file."""
    code = tmp_path / "code"
    code.mkdir()
    module = code / "stampjobs.py"
    write_stamped(module, stack, 1, slow_exit=slow_exit)
    jm = stack.jobmanager(
        "--concurrency", str(concurrency), "--job-module", "stampjobs", *args,
        env={"PYTHONPATH": str(code)},
    )  # fmt: skip
    return module, jm


def test_sighup_restarts_the_children_warm(stack: Stack, tmp_path: Path) -> None:
    module, jm = reloadable(stack, tmp_path, 1)
    long = stack.send("gated", "stampjobs")
    wait_for(lambda: stack.lines("start"), 60, "the long job started")
    ((_, old_pid),) = stack.lines("start")
    # New code on disk, then SIGHUP while the long job runs.
    write_stamped(module, stack, 2)
    jm.signal(signal.SIGHUP)
    jm.wait_output(r"reload: starting 1 new worker processes; 1 old ones finish", 30)
    # A job sent meanwhile runs at once in a new child, with the new code.
    opened = tmp_path / "open"
    opened.touch()
    after = stack.send("gated", "stampjobs", gate=opened)
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


def test_idle_reload_runs_new_jobs_in_the_first_new_child_up(stack: Stack, tmp_path: Path) -> None:
    """Idle, 4 processes, SIGHUP: the new children start one first (four starting
    together come up together, late), and jobs sent after the SIGHUP run at once in
    it, with the new code; none in an old child."""
    module, jm = reloadable(stack, tmp_path, 4)
    wait_for(lambda: len(stamped(stack)) == 4, 60, "4 children imported the job code")
    old = {line.pid for line in stamped(stack)}
    write_stamped(module, stack, 2)
    jm.signal(signal.SIGHUP)
    jm.wait_output(r"reload: starting 4 new worker processes; 4 old ones finish", 30)
    stack.gate.touch()
    msgids = [stack.send("gated", "stampjobs") for _ in range(4)]
    wait_for(lambda: len([x for x in stamped(stack) if x.kind == "done"]) == 4, 60, "4 jobs")
    lines = stamped(stack)
    starts = [x for x in lines if x.kind == "start"]
    assert Counter(x.msgid for x in starts) == Counter(msgids)  # each once
    assert {x.version for x in starts} == {2} and not {x.pid for x in starts} & old
    imports = [x for x in lines if x.kind == "import" and x.version == 2]
    first = imports[0]
    # The first new child imported alone (the next ones started once it was up), and
    # the jobs ran in it before the next one had even imported the job code.
    assert starts[0].pid == first.pid
    assert len(imports) == 1 or imports[1].at > starts[0].at
    wait_for(lambda: not any(_alive(pid) for pid in old), 30, "the old children exited")
    wait_for(lambda: stack.processed() == 4, 30, "4 jobs processed")
    assert "SIGKILL" not in jm.output()


def test_reload_under_load_runs_no_job_in_an_old_child(stack: Stack, tmp_path: Path) -> None:
    """Busy, with jobs prefetched behind the running ones, SIGHUP: the prefetched jobs
    are taken back from the old children and run in new ones (new code); the running
    ones end in their old children, which then exit, slowly, and are not killed."""
    module, jm = reloadable(
        stack, tmp_path, 2, "--prefetch", "4", "--prefetch-budget", "0", "--log-level", "DEBUG",
        slow_exit=True,
    )  # fmt: skip
    wait_for(lambda: len(stamped(stack)) == 2, 60, "2 children imported the job code")
    old = {line.pid for line in stamped(stack)}
    before = [stack.send("gated", "stampjobs") for _ in range(6)]
    # Two run (the gate is shut), four wait in the children's pipes (depth 3 each).
    wait_for(lambda: len([x for x in stamped(stack) if x.kind == "start"]) == 2, 60, "2 run")
    wait_for(lambda: jm.output().count(" received, attempt 1") == 6, 30, "6 jobs received")
    running = {x.msgid for x in stamped(stack) if x.kind == "start"}
    write_stamped(module, stack, 2)
    jm.signal(signal.SIGHUP)
    jm.wait_output(r"reload: starting 2 new worker processes; 2 old ones finish", 30)
    after = [stack.send("gated", "stampjobs") for _ in range(2)]
    stack.gate.touch()
    wait_for(lambda: stack.processed() == 8, 90, "8 jobs processed")
    done = [x for x in stamped(stack) if x.kind == "done"]
    assert Counter(x.msgid for x in done) == Counter(before + after)  # each once
    for line in done:
        if line.msgid in running:
            assert (line.version, line.pid in old) == (1, True), line
        else:  # prefetched before the SIGHUP, or sent after it: new code, new child
            assert (line.version, line.pid in old) == (2, False), line
    # The old children take 5 s to exit (more than EXIT_GRACE): slow, not stuck.
    wait_for(lambda: all(_reaped(jm, pid) for pid in old), 60, "the old children reaped")
    assert "SIGKILL" not in jm.output()
    assert all(f"pid={pid} stopped after" in jm.output() for pid in old)


def _reaped(jm: Proc, pid: int) -> bool:
    output = jm.output()
    return f"pid={pid} stopped after" in output or f"pid={pid} killed for not exiting" in output
