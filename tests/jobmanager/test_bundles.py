"""Bundles between the job manager and a router that reads them (protocol/bundle.py).

What one turn sends goes as one bundle at the end of the turn, never overtaken by
what is sent after it; a bundle of jobs from the router is taken job by job.
The router's side is in tests/router/test_bundles.py; that nothing is bundled for a
router that did not say "bundle", in tests/jobmanager/test_modes.py.
"""

from __future__ import annotations

import logging
import time

import pytest

from django_eventmq.jobmanager.link import RouterLink
from django_eventmq.jobmanager.pool import Status
from django_eventmq.protocol import (
    Cancel,
    Done,
    Features,
    Headers,
    Heartbeat,
    Kbai,
    Ready,
    Request,
    encode,
)
from django_eventmq.protocol.bundle import BUNDLE, bundle
from tests.fake_router import FakeRouter, body
from tests.jobs_fixtures.running import payload, running, settings_for
from tests.support import wait_for


def _request(msgid: str, a: int, b: int) -> list[bytes]:
    job = Request(msgid=msgid, queue="default", headers=Headers(), body_text=body("add", a, b))
    return encode(job)


def test_it_says_it_reads_bundles_and_runs_each_job_of_one(router: FakeRouter) -> None:
    settings = settings_for(router)
    with running(settings):
        identity, _ = router.handshake(features=True)
        _, ours = router.expect(Features)
        # So the router may bundle what it hands out, cut at what our socket takes.
        assert ours.features[BUNDLE] == settings.max_message_bytes
        router.wait_count(Ready, 2)
        assert router.arrived_bundled[:1] == [2]  # both READYs of one turn in one bundle
        router.channel.send_frames(
            [identity, bundle([_request("j-1", 2, 3), _request("j-2", 1, 1)])]
        )
        _, first = router.expect(Done, job_msgid="j-1")
        _, second = router.expect(Done, job_msgid="j-2")
        assert payload(first) == {"value": 5} and payload(second) == {"value": 2}
        router.pump(0.1)
    assert router.malformed == [] and router.illegal == []


def test_a_job_and_its_cancel_in_one_bundle_cancel_it_unstarted(
    router: FakeRouter, caplog: pytest.LogCaptureFixture
) -> None:
    """A job is handed to an idle child as soon as it is read only when nothing
    follows it: here its CANCEL does, and must find it still pending (a running
    job is cancelled by stopping its worker)."""
    caplog.set_level(logging.INFO, logger="django_eventmq.jobmanager")
    with running(settings_for(router, concurrency=1, prefetch=1, prefetch_budget=0)) as jm:
        identity, _ = router.handshake(features=True)
        router.wait_count(Ready, 2)
        children = jm.pool.children
        wait_for(lambda: all(c.status is Status.UP for c in children.values()), what="its child up")
        pids = {child.pid for child in children.values()}
        job = Request(
            msgid="j-slow", queue="default", headers=Headers(), body_text=body("slow", 30)
        )
        cancel = Cancel(msgid="c-1", job_msgid="j-slow")
        router.channel.send_frames([identity, bundle([encode(job), encode(cancel)])])
        _, done = router.expect(Done, job_msgid="j-slow")
        assert done.status == "cancelled"
        msgid = router.request(identity, body("add", 1, 2))
        assert payload(router.expect(Done, job_msgid=msgid)[1]) == {"value": 3}
        assert {child.pid for child in jm.pool.children.values()} == pids
    assert not [r for r in caplog.records if "stopping worker" in r.getMessage()]


def test_a_malformed_bundle_from_the_router_is_logged_and_dropped(
    router: FakeRouter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="django_eventmq.jobmanager")
    with running(settings_for(router)):
        identity, _ = router.handshake(features=True)
        router.wait_count(Ready, 2)
        router.channel.send_frames([identity, b"B1,0\n"])  # a message of no frames
        msgid = router.request(identity, body("add", 1, 2))
        _, done = router.expect(Done, job_msgid=msgid)
        assert payload(done) == {"value": 3}
    dropped = [r.getMessage() for r in caplog.records if "malformed bundle" in r.getMessage()]
    assert len(dropped) == 1 and "a message must have 1 to 32 frames" in dropped[0], dropped


# -- the link: what a turn sends, and what may not overtake it --------------------------


def _dones(link: RouterLink[object], *msgids: str) -> None:
    for msgid in msgids:
        link.send(link.session.done(msgid, "ok", "null"))


def test_what_a_turn_sends_waits_for_its_end_and_goes_as_one_bundle(
    router: FakeRouter, link: RouterLink[object]
) -> None:
    _dones(link, "j-1", "j-2", "j-3")
    router.pump(0.1)
    assert router.count(Done) == 0  # not before the end of the turn
    link.flush()
    router.wait_count(Done, 3)
    assert router.arrived_bundled == [3]
    assert [m.job_msgid for _, m in router.received if isinstance(m, Done)] == ["j-1", "j-2", "j-3"]
    link.send(link.session.done("j-4", "ok", "null"))
    link.flush()  # one message: alone (packed), not a bundle of one
    router.wait_count(Done, 4)
    assert router.arrived_bundled == [3] and router.arrived_packed[-1] == "DONE"


def test_a_heartbeat_never_overtakes_what_the_turn_sent(
    router: FakeRouter, link: RouterLink[object]
) -> None:
    _dones(link, "j-1", "j-2")
    link.keepalive(time.monotonic() + 1.5)  # a heartbeat is due: what waits goes first
    router.wait_count(Heartbeat, 1)
    router.wait_count(Done, 2)
    after_features = [type(m) for _, m in router.received][-3:]
    assert after_features == [Done, Done, Heartbeat]


def test_kbye_and_closing_send_what_the_turn_sent_first(
    router: FakeRouter, link: RouterLink[object]
) -> None:
    _dones(link, "j-1", "j-2")
    link.goodbye()
    router.wait_count(Kbai, 1)
    assert [type(m) for _, m in router.received][-3:] == [Done, Done, Kbai]
    _dones(link, "j-3")
    link.close()  # on the socket before it goes, as a send did before bundles
    router.wait_count(Done, 3)
