"""What ``.delay()`` does with a job when no router, or a slow one, is there.

A job without ``guarantee`` is never lost in silence: with no router
connected within ``SEND_TIMEOUT`` the send raises ``BrokerUnavailable``
(nothing is queued for later), and what was handed over before the process
ends is written out at exit, or the process says it was not. Shown with
real short scripts in their own processes.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import zmq

from django_eventmq.core import transport
from tests.chaos.jobs import RECORD_ENV
from tests.chaos.support import start_jobmanager, start_router
from tests.support import ROOT, clean_environ, receive_request, tcp_addr, wait_for

#: A short script: queue N jobs with .delay() (no guarantee) and end at once.
#: With "pause", after the first job it waits for a line on stdin.
SCRIPT = textwrap.dedent(
    """
    import sys
    from tests.chaos.jobs import record
    count, size = int(sys.argv[1]), int(sys.argv[2])
    print("sending", flush=True)
    for i in range(count):
        record.delay(f"{i}" + "x" * size)
        if i == 0 and sys.argv[3:] == ["pause"]:
            print("connected", flush=True)
            sys.stdin.readline()
    print("sent", count, flush=True)
    """
)


def script_env(addr: str, send_timeout: float) -> dict[str, str]:
    return {
        **clean_environ(),
        "PYTHONPATH": str(ROOT),
        "EMQ_BROKER_ADDR": addr,
        "EMQ_SEND_TIMEOUT": str(send_timeout),
    }


def run_script(
    addr: str, count: int, *, size: int = 0, send_timeout: float = 5.0
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, str(count), str(size)],
        cwd=ROOT,
        env=script_env(addr, send_timeout),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_with_no_router_a_script_s_delay_raises_instead_of_losing_the_job() -> None:
    done = run_script(tcp_addr(), 1, send_timeout=0.3)  # nothing listens there
    assert done.returncode != 0, done.stdout + done.stderr
    assert "sent" not in done.stdout.replace("sending", "")  # .delay() did not return
    assert "BrokerUnavailable: no router at tcp://127.0.0.1:" in done.stderr
    assert "SEND_TIMEOUT=0.3s" in done.stderr


def test_delay_waits_for_a_router_that_comes_within_send_timeout() -> None:
    addr = tcp_addr()
    script = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, "1", "0"],
        cwd=ROOT,
        env=script_env(addr, 30),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert script.stdout is not None
        assert script.stdout.readline() == "sending\n"  # now blocked in .delay()
        router = transport.Channel(transport.ROUTER, bind=addr)
        try:
            _identity, request = receive_request(router)
        finally:
            router.close()
        out, err = script.communicate(timeout=30)
    finally:
        if script.poll() is None:
            script.kill()
            script.wait(5)
    assert request.body_text.startswith('["run",{"callable":"record"')
    assert (script.returncode, out) == (0, "sent 1\n"), err


def test_every_job_of_a_short_script_runs_though_the_router_lags_at_its_exit(
    tmp_path: Path,
) -> None:
    # The router is paused while the script queues its jobs and ends: they are
    # still in the script's socket when it exits, and must be written out once
    # the router reads again (the exit waits up to SEND_TIMEOUT for that) rather
    # than go with the process.
    frontend, backend, admin = tcp_addr(), tcp_addr(), tcp_addr()
    record = tmp_path / "ran.txt"
    router = start_router(frontend, backend, admin, tmp_path / "journal.db")
    jobmanager = start_jobmanager(backend, concurrency=2, **{RECORD_ENV: str(record)})
    script = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, "1000", "40000", "pause"],
        cwd=ROOT,
        env=script_env(frontend, 30),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert script.stdin is not None and script.stdout is not None
        assert script.stdout.readline() == "sending\n"
        assert script.stdout.readline() == "connected\n", script.stderr
        router.signal(signal.SIGSTOP)
        script.stdin.write("go\n")
        script.stdin.flush()
        assert script.stdout.readline() == "sent 1000\n"  # all queued, router still paused
        # More than the kernel's socket buffers hold (40 MB): the script's exit
        # waits for the router (up to SEND_TIMEOUT=30s) instead of dropping
        # what is left. Without that wait it would be gone by now.
        with pytest.raises(subprocess.TimeoutExpired):
            script.wait(2)
        router.signal(signal.SIGCONT)
        out, err = script.communicate(timeout=60)
        assert (script.returncode, out) == (0, ""), err

        def ran() -> int:
            return len(record.read_text().splitlines()) if record.exists() else 0

        try:
            wait_for(lambda: ran() == 1000, 60, "1000 jobs to run")
        except AssertionError as exc:
            got = {int(t.rstrip("x")) for t in record.read_text().split()}
            missing = sorted(set(range(1000)) - got)
            raise AssertionError(
                f"{exc}: ran {ran()}, missing {missing[:5]}..{missing[-5:]}\n{err}\n"
                f"{router.output()[-3000:]}\n{jobmanager.output()[-3000:]}"
            ) from None
        tokens = sorted(int(token.rstrip("x")) for token in record.read_text().split())
        assert tokens == list(range(1000))
        assert "may be lost" not in err
    finally:
        router.signal(signal.SIGCONT)
        if script.poll() is None:
            script.kill()
            script.wait(5)
        jobmanager.stop()
        router.stop()


def test_a_script_says_at_exit_when_the_router_did_not_take_its_jobs() -> None:
    # A router that accepts the connection and never reads: the jobs stay queued
    # in the script's socket, and at exit it waits SEND_TIMEOUT, then says so.
    stalled = zmq.Context.instance().socket(zmq.ROUTER)
    stalled.setsockopt(zmq.RCVHWM, 1)
    stalled.setsockopt(zmq.RCVBUF, 4096)
    stalled.setsockopt(zmq.LINGER, 0)
    port = stalled.bind_to_random_port("tcp://127.0.0.1")
    try:
        done = run_script(f"tcp://127.0.0.1:{port}", 300, size=100_000, send_timeout=0.5)
    finally:
        stalled.close()
    assert (done.returncode, done.stdout) == (0, "sending\nsent 300\n"), done.stderr
    warnings = [line for line in done.stderr.splitlines() if "may be lost" in line]
    assert len(warnings) == 1, done.stderr
    assert f"sent to the router at tcp://127.0.0.1:{port} may be lost" in warnings[0]
    assert "within SEND_TIMEOUT=0.5s" in warnings[0]
