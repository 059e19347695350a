"""FEATURES handshake: DONE mode with a router of ours, READY + REPLY with a reference router."""

from __future__ import annotations

import pytest

from django_eventmq.jobmanager.managed_job import ManagedJob
from django_eventmq.jobmanager.manager import JobManager
from django_eventmq.protocol import Disconnect, Done, Features, Nack, Ready, Reply, new_msgid
from django_eventmq.protocol.bundle import BUNDLE
from django_eventmq.protocol.features import JOBMANAGER_FEATURES, ROUTER_FEATURES
from django_eventmq.protocol.packed import PACKED
from tests.fake_router import FakeRouter, body
from tests.jobs_fixtures.running import payload, running, settings_for


def test_features_switch_to_done_mode(router: FakeRouter) -> None:
    with running(settings_for(router)) as jm:
        identity, _ = router.handshake(features=True)
        _, ours = router.expect(Features)
        assert ours.features["done"] == 1 and ours.features["cancel"] == 1
        router.wait_count(Ready, 2)
        replied = router.request(identity, body("add", 2, 3), reply=True)
        silent = router.request(identity, body("add", 1, 1))
        _, done = router.expect(Done, job_msgid=replied)
        assert (done.status, payload(done)) == ("ok", {"value": 5})
        _, done = router.expect(Done, job_msgid=silent)
        assert (done.status, payload(done)) == ("ok", {"value": 2})
        failing = router.request(identity, body("fail", "bad"), reply=True)
        _, done = router.expect(Done, job_msgid=failing)
        assert done.status == "failed"
        assert payload(done)["error"]["type"] == "ValueError"
        refused = router.request(identity, body("not_a_job", "/nonexistent"))
        _, done = router.expect(Done, job_msgid=refused)
        assert done.status == "refused"
        router.pump(0.1)
        # DONE frees the slot: no READY after the first two, and no REPLY at all.
        assert router.count(Ready) == 2
        assert router.count(Reply) == 0
        assert jm.mode == "done"


def test_it_packs_what_it_sends_to_a_router_that_reads_packed_and_runs_packed_jobs(
    router: FakeRouter,
) -> None:
    with running(settings_for(router)):
        # Without "bundle": what one turn sends would go as one bundle (test_bundles.py).
        identity, _ = router.handshake(features=True, without=(BUNDLE,))
        _, ours = router.expect(Features)
        assert ours.features["packed"] == 1  # so the router may hand jobs out packed
        assert router.peer(identity).packed
        msgid = router.request(identity, body("add", 2, 3), reply=True)
        _, done = router.expect(Done, job_msgid=msgid)
        assert (done.status, payload(done)) == ("ok", {"value": 5})
        # The FEATURES answer goes plain (it tells the router what we read);
        # what follows it, READYs and the DONE, goes packed.
        assert "FEATURES" not in router.arrived_packed
        assert "READY" in router.arrived_packed and "DONE" in router.arrived_packed


@pytest.mark.parametrize(
    ("feature", "arrived"), [(PACKED, "arrived_packed"), (BUNDLE, "arrived_bundled")]
)
def test_it_packs_or_bundles_nothing_for_a_router_whose_features_do_not_say_so(
    router: FakeRouter, feature: str, arrived: str
) -> None:
    with running(settings_for(router)):
        identity, _ = router.handshake(features=True, without=(feature,))
        msgid = router.request(identity, body("add", 1, 1))
        router.expect(Done, job_msgid=msgid)
        assert router.count(Ready) == 2
        assert getattr(router, arrived) == []


def test_without_features_it_is_ready_and_reply_as_the_reference(router: FakeRouter) -> None:
    with running(settings_for(router)) as jm:
        identity, _ = router.handshake()
        router.wait_count(Ready, 2)
        msgid = router.request(identity, body("add", 2, 3), reply=True)
        _, reply = router.expect(Reply, reply_to=msgid)
        assert payload(reply) == {"value": 5}
        router.wait_count(Ready, 3)  # the freed slot
        router.pump(0.1)
        assert router.count(Done) == 0 and router.count(Features) == 0
        assert jm.mode == "reference"


def test_mode_is_per_connection_and_falls_back_on_reconnect(router: FakeRouter) -> None:
    with running(settings_for(router)) as jm:
        first, _ = router.handshake(features=True)
        msgid = router.request(first, body("add", 1, 2), reply=True)
        router.expect(Done, job_msgid=msgid)
        router.send(first, Disconnect(msgid=new_msgid()))
        second, _ = router.handshake()  # a reference router this time
        assert second != first
        msgid = router.request(second, body("add", 2, 2), reply=True)
        identity, reply = router.expect(Reply, reply_to=msgid)
        assert identity == second and payload(reply) == {"value": 4}
        assert jm.mode == "reference"
        router.send(second, Disconnect(msgid=new_msgid()))
        third, _ = router.handshake(features=True)
        msgid = router.request(third, body("add", 3, 3), reply=True)
        identity, done = router.expect(Done, job_msgid=msgid)
        assert identity == third and payload(done) == {"value": 6}


def test_outcome_while_disconnected_goes_out_as_done_on_the_new_socket(
    router: FakeRouter,
) -> None:
    with running(settings_for(router, concurrency=1)):
        first, _ = router.handshake(features=True)
        msgid = router.request(first, body("slow", 0.5), reply=True)
        router.send(first, Disconnect(msgid=new_msgid()))
        second, _ = router.handshake(features=True)
        identity, done = router.expect(Done, job_msgid=msgid)
        assert identity == second and payload(done) == {"value": "slept 0.5"}
        # The slot of the finished job is freed by the DONE, not offered twice.
        router.pump(0.2)
        assert router.count(Ready, second) == 0


def test_our_features_answer_goes_before_the_first_ready(router: FakeRouter) -> None:
    # Our router must know at once that this job manager reports with DONE:
    # a READY before our FEATURES would make it guess reference mode.
    with running(settings_for(router, concurrency=3)):
        identity, _ = router.handshake(features=True)
        router.wait_count(Ready, 3, identity)
        sent = [c for c in router.commands(identity) if c in ("FEATURES", "READY")]
        assert sent == ["FEATURES", "READY", "READY", "READY"]


def test_features_before_ready_after_a_reconnect_too(router: FakeRouter) -> None:
    with running(settings_for(router)):
        first, _ = router.handshake(features=True)
        router.wait_count(Ready, 2, first)
        router.send(first, Disconnect(msgid=new_msgid()))
        second, _ = router.handshake(features=True)
        router.wait_count(Ready, 2, second)
        sent = [c for c in router.commands(second) if c in ("FEATURES", "READY")]
        assert sent == ["FEATURES", "READY", "READY"]


def test_a_quiet_reference_router_still_gets_ready_without_features(router: FakeRouter) -> None:
    # No FEATURES and nothing else after the ACK: READY waits for the mode to
    # settle (FEATURES_WAIT), then comes as the reference expects.
    with running(settings_for(router)) as jm:
        identity, _ = router.handshake(heartbeat=False)
        router.wait_count(Ready, 2, identity)
        assert "FEATURES" not in router.commands(identity)
        assert jm.mode == "reference"
        msgid = router.request(identity, body("add", 1, 2), reply=True)
        _, reply = router.expect(Reply, reply_to=msgid)
        assert payload(reply) == {"value": 3}


def test_it_hears_every_feature_our_router_announces(router: FakeRouter) -> None:
    """The fake router says what the real one says; the job manager takes it all in."""
    with running(settings_for(router)) as jm:
        identity, _ = router.handshake(features=True)
        router.expect(Features)  # our answer: the router's FEATURES was handled
        assert jm.link.session.router_features == dict(ROUTER_FEATURES)  # what our router says
        assert router.peer(identity).announced == dict(JOBMANAGER_FEATURES)
        assert jm.mode == "done"


# -- a job handed back before the mode is known ----------------------------------------------


def _hold_a_handed_back_job(router: FakeRouter) -> JobManager:
    """A job manager that handed a job back (NACK) before any router answered its INFORM."""
    jm = JobManager(settings_for(router, concurrency=1), name="test-jm")
    jm.start()
    # The way a stopping job manager hands back a job its child skipped
    # (lifecycle's HandBack): with no mode yet, the session keeps it.
    jm._nack(ManagedJob("held-1", "default", body("add", 2, 3), reply_requested=True), "stopping")
    assert jm.link.session.held
    return jm


def test_a_job_handed_back_before_the_mode_is_known_goes_to_our_router_as_nack(
    router: FakeRouter,
) -> None:
    jm = _hold_a_handed_back_job(router)
    try:
        router.handshake(features=True)
        [(_, nack)] = router.wait_for(Nack, timeout=20, tick=lambda: jm.loop_once(10))
        assert (nack.job_msgid, nack.reason) == ("held-1", "stopping")
        router.pump(0.05)
        assert router.count(Done) == 0 and router.count(Reply) == 0
    finally:
        jm.close()


def test_a_job_handed_back_before_the_mode_is_known_runs_for_a_reference_router(
    router: FakeRouter,
) -> None:
    # A reference router cannot take a job back: it runs here, and the client's
    # REPLY carries its value (not the hand-back reason).
    jm = _hold_a_handed_back_job(router)
    try:
        router.handshake()
        [(_, reply)] = router.wait_for(Reply, timeout=20, tick=lambda: jm.loop_once(10))
        assert payload(reply) == {"value": 5}
        assert router.count(Nack) == 0
    finally:
        jm.close()
