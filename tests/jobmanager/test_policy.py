"""Policy in a real job manager: QUEUE_ALLOWED_JOBS and the body limits refuse jobs unrun."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from django_eventmq.protocol import Done, Ready, Reply
from tests.fake_router import SAMPLE, FakeRouter, body
from tests.jobs_fixtures.running import payload, running, settings_for

#: ``email`` runs only ``add``; ``reports`` anything in the sample module;
#: other queues (no ``"*"`` entry) are unrestricted.
ALLOWED = (("email", (f"{SAMPLE}.add",)), ("reports", (f"{SAMPLE}.*",)))


def test_a_job_not_allowed_on_its_queue_is_refused_with_done_and_never_runs(
    router: FakeRouter, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "django_eventmq.jobmanager")
    ran = tmp_path / "ran.txt"
    with running(settings_for(router, queue_allowed_jobs=ALLOWED)):
        identity, _ = router.handshake(features=True)
        refused = router.request(identity, body("record", str(ran), "x"), queue="email", reply=True)
        _, done = router.expect(Done, job_msgid=refused)
        assert done.status == "refused"
        error = payload(done)["error"]
        assert error["type"] == "JobNotAllowed"
        assert "not allowed on queue 'email'" in error["message"]
        # Allowed ones still run: by name, by module pattern, and on an open queue.
        for queue, job in (("email", "add"), ("reports", "record"), ("other", "record")):
            args = (1, 2) if job == "add" else (str(ran), queue)
            msgid = router.request(identity, body(job, *args), queue=queue, reply=True)
            _, done = router.expect(Done, job_msgid=msgid)
            assert done.status == "ok", (queue, job, payload(done))
    assert sorted(line.split()[0] for line in ran.read_text().splitlines()) == ["other", "reports"]
    warnings = [r.getMessage() for r in caplog.records if "refused job" in r.getMessage()]
    assert len(warnings) == 1 and f"msgid={refused}" in warnings[0] and "queue=email" in warnings[0]


def test_with_a_reference_router_the_refusal_is_a_reply_and_the_slot_is_offered_again(
    router: FakeRouter, tmp_path: Path
) -> None:
    ran = tmp_path / "ran.txt"
    with running(settings_for(router, concurrency=1, queue_allowed_jobs=ALLOWED)) as jm:
        identity, _ = router.handshake()
        router.wait_count(Ready, 1, identity)
        msgid = router.request(identity, body("record", str(ran), "x"), queue="email", reply=True)
        _, reply = router.expect(Reply, reply_to=msgid)
        assert payload(reply)["error"]["type"] == "JobNotAllowed"
        router.wait_count(Ready, 2, identity)  # the slot it held is free again
        assert jm.mode == "reference"
        # Without reply-requested nothing is sent back but the READY.
        router.request(identity, body("record", str(ran), "y"), queue="email")
        router.wait_count(Ready, 3, identity)
        assert router.count(Reply, identity) == 0  # (expect() consumed the first one)
    assert not ran.exists()


def test_a_catch_all_entry_closes_every_queue_not_named(router: FakeRouter) -> None:
    settings = settings_for(router, queue_allowed_jobs=(("*", ()), ("email", (f"{SAMPLE}.add",))))
    with running(settings):
        identity, _ = router.handshake(features=True)
        closed = router.request(identity, body("add", 1, 1), queue="default")
        allowed = router.request(identity, body("add", 2, 2), queue="email")
        assert router.expect(Done, job_msgid=closed)[1].status == "refused"
        assert router.expect(Done, job_msgid=allowed)[1].status == "ok"


def test_a_malformed_body_on_a_restricted_queue_is_refused_by_the_worker(
    router: FakeRouter,
) -> None:
    with running(settings_for(router, queue_allowed_jobs=ALLOWED)):
        identity, _ = router.handshake(features=True)
        msgid = router.request(identity, '["run", {"path": 1}]', queue="email")
        _, done = router.expect(Done, job_msgid=msgid)
        assert done.status == "refused"
        assert payload(done)["error"]["type"] == "InvalidJob"


def test_the_worker_children_apply_the_configured_body_limits(
    router: FakeRouter, tmp_path: Path
) -> None:
    ran = tmp_path / "ran.txt"
    with running(settings_for(router, max_json_depth=4)):
        identity, _ = router.handshake(features=True)
        deep = router.request(identity, body("record", str(ran), [[[["deep"]]]]))
        shallow = router.request(identity, body("record", str(ran), "shallow"))
        _, done = router.expect(Done, job_msgid=deep)
        assert (done.status, payload(done)["error"]["type"]) == ("refused", "InvalidJob")
        assert router.expect(Done, job_msgid=shallow)[1].status == "ok"
    assert [line.split()[0] for line in ran.read_text().splitlines()] == ["shallow"]


def test_a_job_over_our_body_limit_is_refused_unrun(router: FakeRouter, tmp_path: Path) -> None:
    """A router with looser limits than ours hands out a job over our MAX_BODY_BYTES:
    it never runs, and it is answered (not dropped: the router counts it in flight);
    the worker child refuses it as it parses it."""
    ran = tmp_path / "ran.txt"
    with running(settings_for(router, max_body_bytes=300)):
        identity, _ = router.handshake(features=True)
        big = router.request(identity, body("record", str(ran), "x" * 400), reply=True)
        _, done = router.expect(Done, job_msgid=big)
        assert done.status == "refused"
        error = payload(done)["error"]
        assert error["type"] == "InvalidJob" and "300" in error["message"]
        small = router.request(identity, body("record", str(ran), "small"))
        assert router.expect(Done, job_msgid=small)[1].status == "ok"
    assert [line.split()[0] for line in ran.read_text().splitlines()] == ["small"]


def test_with_a_reference_router_a_job_over_our_limit_frees_its_slot_again(
    router: FakeRouter, tmp_path: Path
) -> None:
    ran = tmp_path / "ran.txt"
    with running(settings_for(router, concurrency=1, max_body_bytes=300)):
        identity, _ = router.handshake()
        router.wait_count(Ready, 1, identity)
        big = router.request(identity, body("record", str(ran), "x" * 400), reply=True)
        _, reply = router.expect(Reply, reply_to=big)
        assert payload(reply)["error"]["type"] == "InvalidJob"
        router.wait_count(Ready, 2, identity)  # the slot it took is offered again
        small = router.request(identity, body("record", str(ran), "small"), reply=True)
        router.expect(Reply, reply_to=small)
        router.wait_count(Ready, 3, identity)
    assert [line.split()[0] for line in ran.read_text().splitlines()] == ["small"]
