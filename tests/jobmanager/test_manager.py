"""The job manager against a fake router: real worker processes, real sockets on loopback."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from django_eventmq.protocol import (
    Ack,
    Disconnect,
    Heartbeat,
    Inform,
    Kbai,
    Ready,
    Reply,
    new_msgid,
)
from tests.fake_router import SAMPLE, FakeRouter, body
from tests.jobs_fixtures.running import payload, running, settings_for
from tests.support import wait_for

JM_LOGGER = "django_eventmq.jobmanager"


def test_inform_names_queues_with_weights_and_ready_follows_ack(
    router: FakeRouter, caplog: pytest.LogCaptureFixture
) -> None:
    settings = settings_for(
        router, queues=((30, "email"), (10, "default")), prefetch=1, prefetch_budget=0
    )
    with caplog.at_level(logging.INFO, JM_LOGGER), running(settings):
        identity, inform = router.expect(Inform)
        assert inform.queues == ((30, "email"), (10, "default"))
        assert inform.peer_type == "worker"
        assert identity.decode().isprintable()
        router.pump(0.2)
        assert router.count(Ready) == 0  # the reference router drops READY before INFORM's ACK
        router.send(identity, Ack(msgid=new_msgid(), ack_msgid=inform.msgid))
        router.wait_count(Ready, 3)
        router.pump(0.2)
        assert router.count(Ready) == 3  # concurrency 2 + prefetch 1
        ready = [r.getMessage() for r in caplog.records if "jobmanager ready" in r.getMessage()]
        assert len(ready) == 1
        assert f"broker={router.addr} queues=email:30,default:10 concurrency=2 pid=" in ready[0]
        assert f"jobmanager connected to {router.addr}" in caplog.text


def test_request_runs_job_with_arguments_without_reply(router: FakeRouter, tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    with running(settings_for(router)):
        identity, _ = router.handshake()
        router.expect(Ready)
        router.expect(Ready)
        router.request(identity, body("record", str(target), "hello"))
        wait_for(lambda: target.exists() and "hello" in target.read_text(), 10, "job ran")
        router.expect(Ready)  # the freed slot is announced again
        assert router.count(Reply) == 0  # no reply-requested, no REPLY


def test_reply_requested_gets_value_with_original_msgid(router: FakeRouter) -> None:
    with running(settings_for(router)):
        identity, _ = router.handshake()
        msgid = router.request(identity, body("add", 2, 3), reply=True)
        _, reply = router.expect(Reply)
        assert reply.reply_to == msgid
        assert payload(reply) == {"value": 5}
        assert reply.msgid != msgid


def test_failing_job_gets_error_reply_and_manager_keeps_serving(
    router: FakeRouter, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, JM_LOGGER), running(settings_for(router)):
        identity, _ = router.handshake()
        failing = router.request(identity, body("fail", "bad input"), reply=True)
        _, reply = router.expect(Reply, reply_to=failing)
        error = payload(reply)
        # A reference client reads "value"; ours reads "error".
        assert error["value"] == "bad input"
        assert error["error"]["type"] == "ValueError"
        assert error["error"]["message"] == "bad input"
        assert "raise ValueError" in error["error"]["traceback"]
        ok = router.request(identity, body("add", 1, 1), reply=True)
        _, reply = router.expect(Reply, reply_to=ok)
        assert payload(reply) == {"value": 2}
    failures = [r for r in caplog.records if "job failed" in r.getMessage()]
    assert len(failures) == 1
    assert failing in failures[0].getMessage() and f"{SAMPLE}.fail" in failures[0].getMessage()


def test_unregistered_job_is_refused_not_run_and_logged(
    router: FakeRouter, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    target = tmp_path / "must-not-exist.txt"
    with caplog.at_level(logging.WARNING, JM_LOGGER), running(settings_for(router)):
        identity, _ = router.handshake()
        msgid = router.request(identity, body("not_a_job", str(target)), reply=True)
        _, reply = router.expect(Reply, reply_to=msgid)
        assert payload(reply)["error"]["type"] == "JobNotAllowed"
        ok = router.request(identity, body("add", 1, 2), reply=True)
        router.expect(Reply, reply_to=ok)
    assert not target.exists()
    refused = [r for r in caplog.records if "refused job" in r.getMessage()]
    assert len(refused) == 1 and refused[0].levelno == logging.WARNING
    assert msgid in refused[0].getMessage() and f"{SAMPLE}.not_a_job" in refused[0].getMessage()


def test_unserialisable_return_value_is_an_error_reply(router: FakeRouter) -> None:
    with running(settings_for(router)):
        identity, _ = router.handshake()
        msgid = router.request(identity, body("unserialisable"), reply=True)
        _, reply = router.expect(Reply, reply_to=msgid)
        assert payload(reply)["error"]["type"] == "SerializationError"


def test_job_that_kills_its_worker_is_reported_and_worker_replaced(
    router: FakeRouter, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING), running(settings_for(router, concurrency=1)):
        identity, _ = router.handshake()
        first = router.request(identity, body("pid"), reply=True)
        old_pid = payload(router.expect(Reply, reply_to=first)[1])["value"]
        crash = router.request(identity, body("crash", 5), reply=True)
        _, reply = router.expect(Reply, reply_to=crash)
        assert payload(reply)["error"]["type"] == "WorkerDied"
        again = router.request(identity, body("pid"), reply=True)
        new_pid = payload(router.expect(Reply, reply_to=again)[1])["value"]
        assert new_pid != old_pid
    lost = [r.getMessage() for r in caplog.records if "job lost" in r.getMessage()]
    assert len(lost) == 1 and crash in lost[0] and f"{SAMPLE}.crash" in lost[0]


def test_heartbeats_are_sent_when_quiet(router: FakeRouter) -> None:
    with running(settings_for(router, heartbeat_interval=0.2, heartbeat_timeout=5.0)):
        router.handshake()
        _, beat = router.expect(Heartbeat)
        assert abs(beat.timestamp - time.time()) < 60


def test_silent_router_means_reconnect_with_new_socket_and_inform(
    router: FakeRouter, caplog: pytest.LogCaptureFixture
) -> None:
    settings = settings_for(router, heartbeat_interval=0.2, heartbeat_timeout=0.6)
    with caplog.at_level(logging.INFO, JM_LOGGER), running(settings):
        first, _ = router.handshake()
        router.expect(Ready)
        # Say nothing more: the job manager must give up on this socket.
        second, inform = router.expect(Inform, timeout=10)
        assert second != first
        router.send(second, Ack(msgid=new_msgid(), ack_msgid=inform.msgid))
        router.wait_count(Ready, 2, second)
        msgid = router.request(second, body("add", 3, 4), reply=True)
        assert payload(reply_keeping_alive(router, second, msgid)) == {"value": 7}
    lost = [r for r in caplog.records if "lost the router" in r.getMessage()]
    assert len(lost) >= 1 and lost[0].levelno == logging.WARNING


def reply_keeping_alive(router: FakeRouter, identity: bytes, msgid: str) -> Reply:
    """The REPLY to ``msgid``, heartbeating meanwhile: on a loaded machine the job may
    take longer than the short heartbeat timeout, and this socket should stay up."""

    def check() -> list[Reply]:
        router.send(identity, Heartbeat(msgid=new_msgid(), timestamp=time.time()))
        router.pump(0.05)
        return [m for _, m in router.received if isinstance(m, Reply) and m.reply_to == msgid]

    replies: list[Reply] = wait_for(check, 10.0, f"the REPLY to {msgid}")
    return replies[0]


@pytest.mark.parametrize("goodbye", [Disconnect, Kbai])
def test_disconnect_or_kbai_means_reconnect(router: FakeRouter, goodbye: type) -> None:
    with running(settings_for(router)):
        first, _ = router.handshake()
        router.send(first, goodbye(msgid=new_msgid()))
        second, _ = router.handshake()
        assert second != first
        msgid = router.request(second, body("add", 1, 1), reply=True)
        router.expect(Reply, reply_to=msgid)


def test_reply_of_running_job_goes_out_on_the_new_socket(router: FakeRouter) -> None:
    with running(settings_for(router, concurrency=1)):
        first, _ = router.handshake()
        msgid = router.request(first, body("slow", 0.5), reply=True)
        router.send(first, Disconnect(msgid=new_msgid()))
        second, _ = router.handshake()
        identity, reply = router.expect(Reply, reply_to=msgid)
        assert identity == second
        assert payload(reply) == {"value": "slept 0.5"}
        # One slot: announced once on the new socket after the job finished.
        router.wait_count(Ready, 1, second)
        router.pump(0.1)
        assert router.count(Ready, second) == 1


def test_malformed_message_is_logged_and_dropped(
    router: FakeRouter, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, JM_LOGGER), running(settings_for(router)):
        identity, _ = router.handshake()
        router.channel.send_frames([identity, b"", b"eMQP/1.0", b"REQUEST", b"id-only"])
        router.channel.send_frames([identity, b"garbage"])
        msgid = router.request(identity, body("add", 2, 2), reply=True)
        assert payload(router.expect(Reply, reply_to=msgid)[1]) == {"value": 4}
    dropped = [r for r in caplog.records if "malformed" in r.getMessage()]
    assert len(dropped) == 2


def test_request_for_a_queue_we_do_not_serve_still_runs(router: FakeRouter) -> None:
    with running(settings_for(router)):
        identity, _ = router.handshake()
        msgid = router.request(identity, body("add", 5, 5), reply=True, queue="other")
        assert payload(router.expect(Reply, reply_to=msgid)[1]) == {"value": 10}


def test_hooks_run_in_the_worker(
    router: FakeRouter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notes = tmp_path / "hooks.txt"
    monkeypatch.setenv("EMQ_TEST_HOOKS_FILE", str(notes))
    with running(settings_for(router, concurrency=1), hooks="tests.jobs_fixtures.hooks"):
        identity, _ = router.handshake()
        msgid = router.request(identity, body("pid"), reply=True)
        pid = payload(router.expect(Reply, reply_to=msgid)[1])["value"]
    lines = notes.read_text().split()
    assert lines == ["setup", str(pid), "before", str(pid), "after", str(pid)]
