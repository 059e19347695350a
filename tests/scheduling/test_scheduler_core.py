"""The scheduler loop against a raw ROUTER socket, with an in-memory store and controlled time."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest

from django_eventmq.protocol import (
    EMPTY_HEADERS,
    Ack,
    Disconnect,
    Heartbeat,
    Inform,
    JobBody,
    Kbai,
    Reply,
    Request,
    Schedule,
    Unschedule,
    new_msgid,
    parse_headers,
)
from django_eventmq.protocol import constants as C
from django_eventmq.runtime import transport
from django_eventmq.runtime.settings import Settings
from django_eventmq.scheduling.identity import ScheduleSpec
from django_eventmq.scheduling.scheduler import Scheduler
from django_eventmq.scheduling.timing import Timing
from tests.fake_router import FakeRouter
from tests.support import wait_for

from .fakes import MemoryStore

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
BODY = JobBody(path="tests.scheduling.jobs", callable="touch", args=("/tmp/x",))


def settings_for(router: FakeRouter, **extra: object) -> Settings:
    return Settings(broker_addr=router.addr, heartbeat_interval=0.2, heartbeat_timeout=0.6, **extra)  # type: ignore[arg-type]


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def scheduler(router: FakeRouter, store: MemoryStore) -> Iterator[Scheduler]:
    sched = Scheduler(settings_for(router), store, poll_interval=0.05, grace=30)
    try:
        yield sched
    finally:
        sched.close()


def connect(router: FakeRouter, scheduler: Scheduler, now: datetime = T0) -> bytes:
    """Drive the scheduler until the fake router has ACKed its INFORM."""

    def tick() -> list[bytes]:
        scheduler.loop_once(now=now, timeout=0)
        router.pump(0.01)
        return router.ack_informs()

    (identity,) = wait_for(tick, 5, "an INFORM")
    wait_for(lambda: (scheduler.loop_once(now=now, timeout=0.01), scheduler.connected)[1], 5, "ACK")
    return identity


def requests(router: FakeRouter) -> list[Request]:
    router.pump(0)
    return [m for _, m in router.of(Request)]  # type: ignore[misc]


def test_informs_as_scheduler_and_fires_request_with_reply_requested(
    router: FakeRouter, scheduler: Scheduler, store: MemoryStore
) -> None:
    store.add(
        ScheduleSpec(
            body=BODY,
            queue="email",
            headers=parse_headers("timeout:30"),
            timing=Timing(interval=60),
        ),
        T0,
    )
    scheduler.loop_once(now=T0, timeout=0)
    router.wait_for(Inform)
    identity, inform = router.of(Inform)[0]
    assert inform.peer_type == C.PEER_SCHEDULER and inform.queues == ()  # type: ignore[attr-defined]
    assert identity.decode().startswith("scheduler-")
    assert requests(router) == [], "nothing is fired before the router ACKs"
    connect(router, scheduler)
    scheduler.loop_once(now=T0, timeout=0)
    (request,) = router.wait_for(Request)
    message = request[1]
    assert isinstance(message, Request)
    assert message.queue == "email"
    assert message.headers.reply_requested and message.headers.timeout == 30
    assert message.body_text == BODY.encode()
    assert list(store.claims.values()) == [message.msgid]
    # Not due again until a minute later (controlled time).
    scheduler.loop_once(now=T0 + timedelta(seconds=59), timeout=0)
    assert len(requests(router)) == 1
    scheduler.loop_once(now=T0 + timedelta(seconds=60), timeout=0)
    router.wait_for(Request, 2)


def test_schedule_in_reference_form_is_stored_and_fired(
    router: FakeRouter, scheduler: Scheduler, store: MemoryStore
) -> None:
    identity = connect(router, scheduler)
    # QUEUE, HEADERS, INTERVAL_SECS, MSG, CRON - exactly what the reference's client sends.
    frames = [
        b"",
        b"eMQP/1.0",
        b"SCHEDULE",
        new_msgid().encode(),
        b"default",
        b"run_count:2",
        b"30",
        BODY.encode().encode(),
        b"",
    ]
    router.send_frames(identity, frames)
    wait_for(lambda: (scheduler.loop_once(timeout=0.01), store.rows)[1], 5, "schedule stored")
    router.wait_for(Request, tick=lambda: scheduler.loop_once(timeout=0.01))  # haste: runs now
    (state,) = store.rows.values()
    assert state.timing == Timing(interval=30)
    assert state.runs_left == 1  # run_count:2, one run done


def test_schedule_in_spec_form_takes_timing_from_headers(
    router: FakeRouter, scheduler: Scheduler, store: MemoryStore
) -> None:
    identity = connect(router, scheduler)
    router.send(
        identity,
        Schedule(
            msgid=new_msgid(),
            queue="default",
            headers=parse_headers("nohaste,cron:30 2 * * *,timezone:Europe/Berlin"),
            body_text=BODY.encode(),
        ),
    )
    wait_for(lambda: (scheduler.loop_once(now=T0, timeout=0.01), store.rows)[1], 5, "stored")
    (state,) = store.rows.values()
    assert state.timing == Timing(cron="30 2 * * *", timezone="Europe/Berlin")
    assert state.headers == EMPTY_HEADERS  # schedule-only headers are not sent to jobs
    assert state.next_run == datetime(2025, 1, 2, 1, 30, tzinfo=UTC)


def test_unschedule_without_timing_removes_every_schedule_of_the_job(
    router: FakeRouter, scheduler: Scheduler, store: MemoryStore
) -> None:
    store.add(
        ScheduleSpec(
            body=BODY, queue="q", headers=EMPTY_HEADERS, timing=Timing(interval=60), nohaste=True
        ),
        T0,
    )
    store.add(
        ScheduleSpec(
            body=BODY,
            queue="q",
            headers=EMPTY_HEADERS,
            timing=Timing(cron="0 * * * *"),
            nohaste=True,
        ),
        T0,
    )
    other = JobBody(path="tests.scheduling.jobs", callable="touch", args=("/tmp/other",))
    store.add(
        ScheduleSpec(
            body=other, queue="q", headers=EMPTY_HEADERS, timing=Timing(interval=60), nohaste=True
        ),
        T0,
    )
    identity = connect(router, scheduler)
    # The reference's unschedule(): interval -1, cron '' -> no timing.
    router.send_frames(
        identity,
        [
            b"",
            b"eMQP/1.0",
            b"UNSCHEDULE",
            b"u1",
            b"default",
            b"",
            b"-1",
            BODY.encode().encode(),
            b"",
        ],
    )
    wait_for(
        lambda: (scheduler.loop_once(now=T0, timeout=0.01), len(store.rows) == 1)[1], 5, "removed"
    )
    # With timing only that schedule goes.
    router.send(
        identity, Unschedule(msgid=new_msgid(), queue="q", body_text=other.encode(), interval=60)
    )
    wait_for(lambda: (scheduler.loop_once(now=T0, timeout=0.01), not store.rows)[1], 5, "removed")
    wait_for(
        lambda: (scheduler.loop_once(now=T0, timeout=0.01), not scheduler.schedules)[1],
        5,
        "dropped",
    )


def test_malformed_messages_are_logged_once_and_the_scheduler_keeps_serving(
    router: FakeRouter, scheduler: Scheduler, store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    identity = connect(router, scheduler)
    caplog.set_level(logging.WARNING, "django_eventmq.scheduler")
    router.send_frames(identity, [b"", b"eMQP/1.0", b"SCHEDULE", b"m1", b"q"])  # too short
    router.send_frames(
        identity, [b"", b"eMQP/1.0", b"SCHEDULE", b"m2", b"q", b"", b"5", b"not json", b""]
    )
    router.send_frames(
        identity,
        [
            b"",
            b"eMQP/1.0",
            b"SCHEDULE",
            b"m3",
            b"q",
            b"",
            b"-1",
            BODY.encode().encode(),
            b"99 * * * *",
        ],
    )
    router.send(identity, Schedule(msgid="m4", queue="q", body_text=BODY.encode()))  # no timing
    wait_for(
        lambda: (scheduler.loop_once(now=T0, timeout=0.01), len(caplog.records) >= 4)[1],
        5,
        "4 warnings",
    )
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert (
        "malformed" in text
        and "not valid JSON" in text
        and "not a cron" in text
        and "no timing" in text
    )
    assert len(caplog.records) == 4
    assert store.rows == {}
    # Still serving: a good SCHEDULE afterwards is stored.
    router.send(identity, Schedule(msgid="m5", queue="q", body_text=BODY.encode(), interval=5))
    wait_for(lambda: (scheduler.loop_once(now=T0, timeout=0.01), store.rows)[1], 5, "stored")


def test_heartbeats_and_reconnects_when_the_router_goes_silent(
    router: FakeRouter, scheduler: Scheduler
) -> None:
    first = connect(router, scheduler)
    router.wait_for(Heartbeat, tick=lambda: scheduler.loop_once(timeout=0.01))
    # Say nothing: after HEARTBEAT_TIMEOUT the scheduler starts over with a new INFORM.
    router.wait_for(Inform, 2, tick=lambda: scheduler.loop_once(timeout=0.01))
    assert not scheduler.connected
    second = router.of(Inform)[1][0]
    assert second == first  # same printable identity, fresh conversation
    router.ack_informs()
    wait_for(lambda: (scheduler.loop_once(timeout=0.01), scheduler.connected)[1], 5, "reconnected")


def acks_to(router: FakeRouter, identity: bytes, scheduler: Scheduler) -> Callable[[], None]:
    """A tick: the router ACKs something (as it ACKs REQUESTs), the scheduler runs a turn."""

    def tick() -> None:
        router.send(identity, Ack(msgid=new_msgid(), ack_msgid=new_msgid()))
        scheduler.loop_once(timeout=0.01)

    return tick


def test_a_router_that_acks_but_no_longer_heartbeats_it_gets_a_new_inform(
    router: FakeRouter, scheduler: Scheduler, caplog: pytest.LogCaptureFixture
) -> None:
    """ACKs keep it alive, but without HEARTBEAT (nor SCHEDULE) for two timeouts the
    router has forgotten it (as a restarted reference router would): it INFORMs again,
    on the same connection (nothing it queued is dropped), and stays connected."""
    caplog.set_level(logging.INFO, logger="django_eventmq.scheduler")
    identity = connect(router, scheduler)
    channel = scheduler.channel
    acks_only = acks_to(router, identity, scheduler)
    router.wait_for(Inform, 2, tick=acks_only)
    assert "sent no HEARTBEAT for 1.2s (it forgot this scheduler?): INFORM again" in caplog.text
    assert scheduler.channel is channel and scheduler.connected
    assert "reconnecting" not in caplog.text
    router.ack_informs()
    wait_for(lambda: (acks_only(), "registered again" in caplog.text)[1], 5, "its ACK")
    assert scheduler.channel is channel


def test_a_router_that_heartbeats_late_is_not_taken_for_one_that_forgot_it(
    router: FakeRouter, scheduler: Scheduler, caplog: pytest.LogCaptureFixture
) -> None:
    """A slow router (a long journal commit) ACKs on time but heartbeats late, here
    every 1.5 timeouts: the scheduler neither INFORMs again nor reconnects."""
    identity = connect(router, scheduler)
    channel = scheduler.channel
    ack = acks_to(router, identity, scheduler)
    late = 1.5 * scheduler.settings.heartbeat_timeout
    beats = {"sent": 0, "at": time.monotonic()}

    def slow_router() -> bool:
        if time.monotonic() - beats["at"] >= late:
            router.send(identity, Heartbeat(msgid=new_msgid(), timestamp=0.0))
            beats["sent"] += 1
            beats["at"] = time.monotonic()
        ack()
        return beats["sent"] >= 4

    wait_for(slow_router, 15, "four late heartbeats")
    router.pump(0.01)
    assert len(router.of(Inform)) == 1
    assert scheduler.channel is channel and scheduler.connected
    assert "INFORM again" not in caplog.text and "reconnecting" not in caplog.text


def test_disconnect_gets_kbai_and_a_reply_is_recorded(
    router: FakeRouter, scheduler: Scheduler, store: MemoryStore
) -> None:
    identity = connect(router, scheduler)
    router.send(identity, Reply(msgid=new_msgid(), payload='{"value": 42}', reply_to="job-1"))
    wait_for(lambda: (scheduler.loop_once(timeout=0.01), store.results)[1], 5, "result")
    assert store.results == {"job-1": '{"value": 42}'}
    router.send(identity, Disconnect(msgid=new_msgid()))
    router.wait_for(Kbai, tick=lambda: scheduler.loop_once(timeout=0.01))
    assert not scheduler.connected


def test_edit_in_store_is_picked_up_without_restart(
    router: FakeRouter, scheduler: Scheduler, store: MemoryStore
) -> None:
    state = store.add(
        ScheduleSpec(
            body=BODY, queue="q", headers=EMPTY_HEADERS, timing=Timing(interval=3600), nohaste=True
        ),
        T0,
    )
    connect(router, scheduler)
    scheduler.loop_once(now=T0 + timedelta(seconds=10), timeout=0)
    assert requests(router) == []
    store.edit(state.id, timing=Timing(interval=5), next_run=T0 + timedelta(seconds=5))
    router.wait_for(
        Request, tick=lambda: scheduler.loop_once(now=T0 + timedelta(seconds=10), timeout=0.01)
    )


def test_two_schedulers_on_one_store_send_each_run_once(
    router: FakeRouter, store: MemoryStore
) -> None:
    store.add(
        ScheduleSpec(body=BODY, queue="q", headers=EMPTY_HEADERS, timing=Timing(interval=10)), T0
    )
    a = Scheduler(settings_for(router), store, poll_interval=0.0)
    b = Scheduler(settings_for(router), store, poll_interval=0.0)
    try:
        for sched in (a, b):
            connect(router, sched)
        for step in range(0, 60):
            now = T0 + timedelta(seconds=step)
            a.loop_once(now=now, timeout=0)
            b.loop_once(now=now, timeout=0)
        fired = [m for _, m in router.wait_for(Request, count=len(store.claims))]
        assert len(fired) == 6 == len(store.claims)
        assert len({m.msgid for m in fired}) == 6
    finally:
        a.close()
        b.close()


def test_restart_resumes_from_the_store_with_catch_up_policy(router: FakeRouter) -> None:
    for policy, expected in (("once", 1), ("skip", 0), ("all", 10)):
        store = MemoryStore()
        store.add(
            ScheduleSpec(body=BODY, queue="q", headers=EMPTY_HEADERS, timing=Timing(interval=60)),
            T0,
        )
        first = Scheduler(settings_for(router), store, poll_interval=0.0, grace=5)
        connect(router, first, T0)
        first.loop_once(now=T0, timeout=0)
        first.close()  # the scheduler stops; ten minutes pass
        second = Scheduler(settings_for(router), store, catchup=policy, poll_interval=0.0, grace=5)
        try:
            connect(router, second, T0 + timedelta(minutes=10, seconds=30))
            second.loop_once(now=T0 + timedelta(minutes=10, seconds=30), timeout=0)
            assert len(store.fired) == 1 + expected, policy
            assert store.rows[1].next_run == T0 + timedelta(minutes=11)
        finally:
            second.close()


def test_daily_berlin_job_fires_once_per_day_across_dst_in_the_loop(
    router: FakeRouter, scheduler: Scheduler, store: MemoryStore
) -> None:
    start = datetime(2025, 3, 29, 12, tzinfo=UTC)
    timing = Timing(cron="30 2 * * *", timezone="Europe/Berlin")
    store.add(
        ScheduleSpec(body=BODY, queue="q", headers=EMPTY_HEADERS, timing=timing, nohaste=True),
        start,
    )
    connect(router, scheduler, start)
    scheduler.poll_interval = 1e9  # no reloads needed: the store only changes through us
    for spring_or_fall in (start, datetime(2025, 10, 25, 12, tzinfo=UTC)):
        store.edit(1, next_run=timing.next_after(spring_or_fall))
        scheduler.refresh()
        now = spring_or_fall
        while now < spring_or_fall + timedelta(days=2):  # minute by minute, 2 days
            scheduler.fire_due(now)
            now += timedelta(minutes=1)
    days = [fire.astimezone(timing.zone).date().isoformat() for _, fire, _ in store.fired]
    assert days == ["2025-03-30", "2025-03-31", "2025-10-26", "2025-10-27"]
    # The last REQUEST may still be on its way over loopback: wait for all of them.
    sent = router.wait_for(Request, count=len(store.fired))
    assert [m.msgid for _, m in sent] == [msgid for _, _, msgid in store.fired]


def test_a_socket_with_no_connection_to_queue_for_is_dropped_not_waited_on(
    router: FakeRouter, store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A refused CURVE handshake can leave the scheduler's socket with no connection to
    queue a message for: a send would then wait for ever (a scheduler with the
    wrong key hung in its INFORM). The scheduler drops the connection, says why,
    and tries again later. Played here with a socket that queues only toward a
    completed connection (IMMEDIATE) and a router that does not read yet."""
    caplog.set_level(logging.DEBUG, "django_eventmq.scheduler")
    sched = Scheduler(settings_for(router), store, poll_interval=0.05)
    sched._options = {**sched._options, transport.IMMEDIATE: 1}
    router.close()  # nothing listens: no connection completes
    try:
        sched.loop_once(now=T0, timeout=0)
        assert sched.channel is None
        assert any("takes no message" in r.getMessage() for r in caplog.records)
    finally:
        sched.close()
