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
import threading
import time
from pathlib import Path
from typing import IO

import pytest
import zmq

from django_eventmq.client.connection import Client
from django_eventmq.errors import BrokerUnavailable, JobRejected
from django_eventmq.protocol import Ack, Reject, Reply, new_msgid
from django_eventmq.runtime import transport
from tests.support import ROOT, clean_environ, receive_request, tcp_addr, wait_for
from tests.system.chaos.jobs import RECORD_ENV
from tests.system.chaos.support import start_jobmanager, start_router

#: A short script: queue N jobs with .delay() (no guarantee) and end at once.
#: With "connect" it first waits (up to 30 s) until its socket is connected, so
#: that a short SEND_TIMEOUT bounds only its exit, not how soon it connects.
#: With "fill" it waits, once connected, for a line on stdin, then queues jobs
#: until its socket takes no more (as a sender faster than the router leaves
#: it at exit); "fill-answered" first sends one job and waits for the router's
#: FEATURES answer. The client's log (the exit flush's too) goes to stderr.
SCRIPT = textwrap.dedent(
    """
    import logging, sys
    import zmq
    from django_eventmq.client import connection, pool
    from django_eventmq.runtime import config
    from django_eventmq.errors import BrokerUnavailable
    from tests.system.chaos.jobs import record
    log = logging.getLogger("django_eventmq.client")
    log.setLevel(logging.DEBUG)
    log.addHandler(logging.StreamHandler())
    count, size, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    fill = mode[:1] in (["fill"], ["fill-answered"])
    sent = 0
    if mode:
        if fill:
            connection.CLIENT_SNDHWM = 100  # a full socket in fewer jobs
        settings = config.get_settings()
        sender = pool.get_client(settings.broker_addr, send_timeout=settings.send_timeout)
        if mode == ["fill-answered"]:
            record.delay("0" + "x" * size)
            sent = 1
            while sender.router_features is None:
                sender.channel.poll(1000)
                sender.drain()
        else:
            # Connected (IMMEDIATE: no room to send before).
            assert sender.channel.socket.poll(30_000, zmq.POLLOUT), "not connected in 30 s"
    if fill:
        print("connected", flush=True)
        sys.stdin.readline()
    print("sending", flush=True)
    if fill:
        socket = sender.channel.socket
        socket.setsockopt(zmq.SNDTIMEO, 0)  # what it takes now, no more
        while True:
            try:
                record.delay(f"{sent}" + "x" * size)
                sent += 1
            except BrokerUnavailable:
                # ZeroMQ may hand back room a little later: full is none for a while.
                if not socket.poll(200, zmq.POLLOUT):
                    break
        socket.setsockopt(zmq.SNDTIMEO, int(settings.send_timeout * 1000))
    for i in range(count):
        record.delay(f"{i}" + "x" * size)
    print("sent", sent or count, flush=True)
    """
)

#: What the exit flush logs before it waits for the router.
WAITING_AT_EXIT = "at exit: waiting up to"


def script_env(addr: str, send_timeout: float) -> dict[str, str]:
    return {
        **clean_environ(),
        "PYTHONPATH": str(ROOT),
        "EMQ_BROKER_ADDR": addr,
        "EMQ_SEND_TIMEOUT": str(send_timeout),
    }


def run_script(
    addr: str, count: int, *mode: str, size: int = 0, send_timeout: float = 5.0
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, str(count), str(size), *mode],
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
            identity, request = receive_request(router)
            # Answered as the reference router does (a receipt, no FEATURES): the
            # script's exit learns it cannot ask this router to confirm, and ends.
            router.send_to(identity, Reply(msgid=new_msgid(), payload=request.msgid))
            out, err = script.communicate(timeout=30)
        finally:
            router.close()
    finally:
        if script.poll() is None:
            script.kill()
            script.wait(5)
    assert request.body_text.startswith('["run",{"callable":"record"')
    assert (script.returncode, out) == (0, "sent 1\n"), err


def read_until(stream: IO[str], marker: str) -> None:
    """Read ``stream`` up to a line with ``marker`` (fails at its end without one)."""
    seen = []
    for line in stream:
        seen.append(line)
        if marker in line:
            return
    raise AssertionError(f"no {marker!r} in:\n{''.join(seen)}")


@pytest.mark.parametrize("mode", ["fill", "fill-answered"])
def test_every_job_of_a_short_script_runs_though_the_router_lags_at_its_exit(
    tmp_path: Path, mode: str
) -> None:
    # The router is paused (before it answered the script's FEATURES, or after)
    # until the script, its socket full of jobs, is at its exit: the jobs must
    # be written out once the router reads again, and the router must confirm
    # it has read them before the script closes its connection (the exit waits
    # up to SEND_TIMEOUT for that) rather than go with the process.
    frontend, backend, admin = tcp_addr(), tcp_addr(), tcp_addr()
    record = tmp_path / "ran.txt"
    router = start_router(frontend, backend, admin, tmp_path / "journal.db")
    jobmanager = start_jobmanager(backend, concurrency=2, **{RECORD_ENV: str(record)})
    script = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, "0", "40000", mode],
        cwd=ROOT,
        env=script_env(frontend, 30),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert script.stdin is not None and script.stdout is not None
        assert script.stderr is not None
        assert script.stdout.readline() == "connected\n"
        router.signal(signal.SIGSTOP)
        script.stdin.write("go\n")
        script.stdin.flush()
        assert script.stdout.readline() == "sending\n"
        sent_line = script.stdout.readline()  # its socket full, router still paused
        assert sent_line.startswith("sent "), sent_line
        sent = int(sent_line.split()[1])
        assert sent > 100
        read_until(script.stderr, WAITING_AT_EXIT)
        router.signal(signal.SIGCONT)
        out, err = script.communicate(timeout=60)
        assert (script.returncode, out) == (0, ""), err

        def ran() -> int:
            return len(record.read_text().splitlines()) if record.exists() else 0

        try:
            wait_for(lambda: ran() == sent, 60, f"{sent} jobs to run")
        except AssertionError as exc:
            got = {int(t.rstrip("x")) for t in record.read_text().split()}
            missing = sorted(set(range(sent)) - got)
            raise AssertionError(
                f"{exc}: ran {ran()}, missing {missing[:5]}..{missing[-5:]}\n{err}\n"
                f"{router.output()[-3000:]}\n{jobmanager.output()[-3000:]}"
            ) from None
        tokens = sorted(int(token.rstrip("x")) for token in record.read_text().split())
        assert tokens == list(range(sent))
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
    # The script waits for its connection first ("connect"), however long a
    # loaded machine takes: the short SEND_TIMEOUT is for its exit.
    stalled = zmq.Context.instance().socket(zmq.ROUTER)
    stalled.setsockopt(zmq.RCVHWM, 1)
    stalled.setsockopt(zmq.RCVBUF, 4096)
    stalled.setsockopt(zmq.LINGER, 0)
    port = stalled.bind_to_random_port("tcp://127.0.0.1")
    try:
        done = run_script(f"tcp://127.0.0.1:{port}", 300, "connect", size=100_000, send_timeout=0.5)
    finally:
        stalled.close()
    assert (done.returncode, done.stdout) == (0, "sending\nsent 300\n"), done.stderr
    warnings = [line for line in done.stderr.splitlines() if "may be lost" in line]
    assert len(warnings) == 1, done.stderr
    assert f"sent to the router at tcp://127.0.0.1:{port} may be lost" in warnings[0]
    assert "within SEND_TIMEOUT=0.5s" in warnings[0]


def guaranteed_send(
    addr: str, msgid: bytes, *, send_timeout: float, ack_timeout: float
) -> tuple[threading.Thread, list[BaseException]]:
    """A guaranteed send of job ``msgid`` (3 retries) in a thread started here; the
    list gets what it raised (JobRejected or BrokerUnavailable)."""
    raised: list[BaseException] = []

    def send() -> None:
        sender = Client(addr, send_timeout=send_timeout)
        try:
            sender.send_request_guaranteed(
                msgid, b"default", b"guarantee", b"[]", ack_timeout=ack_timeout, retries=3
            )
        except (JobRejected, BrokerUnavailable) as exc:
            raised.append(exc)
        finally:
            sender.close()

    thread = threading.Thread(target=send)
    thread.start()
    return thread, raised


def test_a_guaranteed_job_whose_router_went_away_after_taking_it_may_be_stored() -> None:
    # The router read the job and went before acknowledging it: the resend finds
    # no router connected within SEND_TIMEOUT. The error must not say nothing
    # was queued, since the job may be stored: it says to send it again.
    addr = tcp_addr()
    router = transport.Channel(transport.ROUTER, bind=addr)
    thread, raised = guaranteed_send(addr, b"m-sure", send_timeout=0.3, ack_timeout=0.3)
    try:
        _identity, request = receive_request(router)
    finally:
        router.close()
    thread.join(30)
    assert request.msgid == "m-sure"
    assert len(raised) == 1, raised
    assert "did not acknowledge job m-sure after 1 send(s)" in str(raised[0])
    assert "sending it again with the same msgid is safe" in str(raised[0])
    assert raised[0].msgid == "m-sure"  # to send it again with (job.send(..., msgid=...))


def test_a_guaranteed_job_the_router_refuses_raises_its_reason_at_once() -> None:
    """A REJECT (high-water mark under HWM_POLICY "reject", a journal that cannot be
    written, a limit) answers a guaranteed send: it raises JobRejected with the
    router's reason, not BrokerUnavailable after every retry; the job is not sent
    again."""
    addr = tcp_addr()
    router = transport.Channel(transport.ROUTER, bind=addr)
    reason = "router is full: over its high-water mark (10 jobs waiting)"
    thread, raised = guaranteed_send(addr, b"m-no", send_timeout=5.0, ack_timeout=30.0)
    try:
        identity, request = receive_request(router)
        router.send_to(identity, Reject(msgid=new_msgid(), job_msgid=request.msgid, reason=reason))
        thread.join(20)
        assert not router.poll(0), "sent again after the REJECT"
    finally:
        router.close()
    assert len(raised) == 1 and isinstance(raised[0], JobRejected), raised
    assert (raised[0].reason, raised[0].msgid) == (reason, "m-no")


def test_a_long_running_process_s_exit_finds_the_router_s_unread_answer(start_router) -> None:
    # Our router's FEATURES answer came after the client last read its socket,
    # and the process ran on for longer than SEND_TIMEOUT (a web worker): the
    # exit still finds the answer, and asks this router to confirm.
    h = start_router()
    sender = Client(h.router.frontend_address, send_timeout=1.0)
    try:
        sender.ask_features(wait=True)  # as the first .delay() does, without reading after it
        wait_for(lambda: sender.channel.poll(0), what="the router's answer, unread")
        assert sender.router_features is None
        sender.session.decide_by -= 60  # as if it went out a minute ago
        assert sender.confirm_read(time.monotonic() + 10) is True
    finally:
        sender.close()


def test_a_refusal_of_an_earlier_copy_does_not_undo_a_later_copy_s_ack() -> None:
    """The router stalled past ACK_TIMEOUT, so the job was sent again; it refuses the
    first copy (its journal could not be written then) and stores the second. The
    REJECT may answer either copy: the send waits for the ACK and returns (it raised
    JobRejected, and a caller sending the job anew would run it twice)."""
    addr = tcp_addr()
    router = transport.Channel(transport.ROUTER, bind=addr)
    thread, raised = guaranteed_send(addr, b"m-two", send_timeout=5.0, ack_timeout=0.3)
    try:
        identity, first = receive_request(router)
        _identity, second = receive_request(router)  # sent again: no answer in time
        assert first.msgid == second.msgid == "m-two"
        reason = "router cannot store jobs now (its journal: disk full); send it again later"
        router.send_to(identity, Reject(msgid=new_msgid(), job_msgid="m-two", reason=reason))
        router.send_to(identity, Ack(msgid=new_msgid(), ack_msgid="m-two"))
        thread.join(20)
    finally:
        router.close()
    assert not thread.is_alive() and raised == []
