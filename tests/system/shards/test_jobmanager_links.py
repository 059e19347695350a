"""A job manager of two router groups, against two fake routers (real sockets and
worker processes): a link per group, each job's DONE over the link it came from,
READY credit on each, and one group's loss leaves the other served."""

from __future__ import annotations

from django_eventmq.protocol import Disconnect, Done, Ready, new_msgid
from tests.fake_router import FakeRouter, body
from tests.jobs_fixtures.running import payload, running, settings_for
from tests.support import tcp_addr, wait_for


def test_each_group_gets_its_own_link_and_its_own_dones() -> None:
    one, two = FakeRouter(), FakeRouter()
    try:
        # The first group names a second member (nothing there): WORKER_ADDR has a comma.
        worker = f"{one.addr},{tcp_addr()};{two.addr}"
        with running(settings_for(one, worker_addr=worker, concurrency=2)) as jm:
            assert [link.addr for link in jm.links] == [one.addr, two.addr]
            first, _ = one.handshake(features=True)
            second, _ = two.handshake(features=True)
            # Each link offers the free slots to its router.
            one.wait_count(Ready, 2)
            two.wait_count(Ready, 2)
            a = one.request(first, body("add", 1, 2), reply=True)
            b = two.request(second, body("add", 3, 4), reply=True)
            _, done_a = one.expect(Done)
            _, done_b = two.expect(Done)
            assert (done_a.job_msgid, payload(done_a)) == (a, {"value": 3})
            assert (done_b.job_msgid, payload(done_b)) == (b, {"value": 7})
            # The first group's router goes: its link moves on (to the spare member),
            # the second keeps serving.
            one.send(first, Disconnect(msgid=new_msgid()))
            wait_for(lambda: jm.links[0].addr != one.addr, 10, "the first link to move on")
            c = two.request(second, body("add", 5, 6), reply=True)
            _, done_c = two.expect(Done)
            assert done_c.job_msgid == c
            assert jm.links[1].connected and jm.links[1].addr == two.addr
    finally:
        one.close()
        two.close()
