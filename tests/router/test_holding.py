"""After a failover or a restart: the jobs a job manager says it holds, and DONEs
for jobs the router holds on disk only.

A job manager that reconnects names, in its FEATURES answer, the msgids of
the jobs it still runs or has not reported (``"holding"``). A router that
recovered those jobs as waiting (a restart on the same journal, a standby
taking over) keeps them in flight on that job manager instead of handing
them to another. And a DONE for a job that waits on disk only (past the
queue's in-memory window, or not loaded since the restart) finishes it.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable
from typing import Any

import pytest

from tests.router.test_router import JOB, ROUTER_LOG, Harness, Peer
from tests.router.test_router_journal import (  # noqa: F401 (journal_path, start: fixtures)
    journal_path,
    modern_worker,
    monitor,
    start,
    stop,
)
from tests.support import wait_for

FEATURES = {"done": 1, "cancel": 1}


def shown(h: Harness, peer: Peer) -> dict[str, Any] | None:
    workers = h.ask("ROUTER_SHOW_WORKERS")["connected_workers"]
    return workers.get(peer.identity.decode())  # type: ignore[no-any-return]


def holding_worker(h: Harness, name: str, holding: list[Any]) -> Peer:
    """A job manager that reconnects holding ``holding`` (its FEATURES answer), no READY."""
    peer = h.peer("backend", name)
    inform = peer.send("INFORM", "", "worker")
    assert peer.expect("ACK")[2] == inform
    peer.expect("FEATURES")
    peer.send("FEATURES", json.dumps({**FEATURES, "holding": holding}))
    return peer


def stored(path: str) -> tuple[set[str], set[str]]:
    """The msgids the journal file holds as jobs, and those it knows finished."""
    reader = sqlite3.connect(path)
    try:
        jobs = {m for (m,) in reader.execute("SELECT msgid FROM jobs")}
        finished = {m for (m,) in reader.execute("SELECT msgid FROM finished")}
    finally:
        reader.close()
    return jobs, finished


def test_a_job_its_job_manager_holds_after_a_restart_is_not_handed_to_another(
    start: Callable[..., Harness],  # noqa: F811
    journal_path: str,  # noqa: F811
) -> None:
    h = start()
    first = modern_worker(h, "first", ready=1)
    client = h.peer("frontend", "client")
    running = h.request(client, headers="guarantee")
    waiting = h.request(client, headers="guarantee")
    assert first.expect("REQUEST")[1] == running
    stop(h)  # the router goes; the job manager keeps running its job

    h = start()
    info = monitor(h)
    assert (info["queued"], info["recovered"], info["in_memory"]) == (2, 1, 0)
    back = holding_worker(h, "back", [running])  # the same job manager, a new socket
    wait_for(lambda: (shown(h, back) or {}).get("inflight") == 1, what="the held job")
    assert shown(h, back)["available_slots"] == 0  # type: ignore[index]
    other = modern_worker(h, "other", ready=0)
    other.send("READY")
    other.send("READY")
    assert other.expect("REQUEST")[1] == waiting
    with pytest.raises(AssertionError, match="nothing received"):
        other.expect("REQUEST", timeout=0.5)  # the held job is not handed out again
    info = monitor(h)
    assert (info["queued"], info["in_flight"], info["adopted"]) == (0, 2, 1)

    back.send("DONE", running, "ok", '{"value": 1}')
    other.send("DONE", waiting, "ok", '{"value": 2}')
    wait_for(lambda: monitor(h)["in_flight"] == 0, what="both DONEs")
    # Its DONE freed the slot the job used, as for any job handed out.
    wait_for(lambda: (shown(h, back) or {}).get("available_slots") == 1, what="its slot")
    assert h.ask("STATUS")["processed_messages_by_queue"] == {"default": 2}
    stop(h)
    assert stored(journal_path) == (set(), {running, waiting})


def test_a_held_job_waiting_in_memory_stays_with_the_job_manager_that_holds_it(
    start_router: Callable[..., Harness],
) -> None:
    h = start_router()
    client = h.peer("frontend", "client")
    held = h.request(client, headers="reply-requested")
    later = h.request(client)
    assert monitor(h)["in_memory"] == 2
    holder = holding_worker(h, "holder", [held])
    wait_for(lambda: (shown(h, holder) or {}).get("inflight") == 1, what="the held job")
    other = modern_worker(h, "other", ready=0)
    other.send("READY")
    other.send("READY")
    assert other.expect("REQUEST")[1] == later
    assert not other.pending() and not holder.pending()
    holder.send("DONE", held, "ok", '{"value": 1}')
    assert client.expect("REPLY")[2:] == ['{"value": 1}', held]
    info = monitor(h)
    assert (info["queued"], info["in_flight"]) == (0, 1)


def test_a_held_job_is_handed_out_again_when_its_job_manager_is_lost(
    start_router: Callable[..., Harness],
) -> None:
    # No grace after KBYE: a job its job manager took with it waits again at once.
    h = start_router(shutdown_grace=0.0, lease_grace=0.0)
    client = h.peer("frontend", "client")
    held = h.request(client)
    holder = holding_worker(h, "holder", [held])
    wait_for(lambda: (shown(h, holder) or {}).get("inflight") == 1, what="the held job")
    holder.send("KBYE")  # gone before it reported it
    other = modern_worker(h, "other", ready=0)
    other.send("READY")
    assert other.expect("REQUEST")[1] == held
    assert monitor(h)["expired"] == 1


def test_unknown_or_malformed_held_msgids_are_ignored_and_a_running_one_moves(
    start_router: Callable[..., Harness], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=ROUTER_LOG)
    h = start_router()
    first = modern_worker(h, "first")
    client = h.peer("frontend", "client")
    elsewhere = h.request(client)
    assert first.expect("REQUEST")[1] == elsewhere
    waiting = h.request(client)
    holder = holding_worker(h, "holder", ["never-sent", elsewhere, 7, None])
    holder.send("READY")
    assert holder.expect("REQUEST")[1] == waiting  # its slot is free: a held job uses none
    # The one in flight on another identity moved to the job manager that says it
    # holds it (most likely itself, reconnected: see the test below).
    assert (shown(h, first) or {}).get("inflight") == 0
    assert (shown(h, holder) or {}).get("inflight") == 2
    wait_for(
        lambda: any("never-sent" in r.getMessage() for r in caplog.records),
        what="the unknown msgid to be logged",
    )
    assert monitor(h)["in_flight"] == 2


def test_a_done_for_a_job_waiting_on_disk_only_finishes_it(
    start: Callable[..., Harness],  # noqa: F811
    journal_path: str,  # noqa: F811
) -> None:
    h = start(queue_window=2)
    client = h.peer("frontend", "client")
    sent = [h.request(client, headers="reply-requested") for _ in range(6)]
    assert monitor(h)["in_memory"] < 6
    worker = modern_worker(h, "w", ready=0)
    # It ran the last one (a router before a failover handed it out, say).
    worker.send("DONE", sent[-1], "ok", '{"value": 6}')
    assert client.expect("REPLY")[2:] == ['{"value": 6}', sent[-1]]
    got = []
    for _ in range(5):  # each DONE frees the slot for the next job
        got.append(worker.expect("REQUEST")[1])
        worker.send("DONE", got[-1], "ok", "{}")
        assert client.expect("REPLY")[3] == got[-1]
    assert got == sent[:-1]  # the finished one is never handed out
    wait_for(lambda: monitor(h)["queued"] == 0, what="the DONEs")
    assert not worker.pending()
    stop(h)
    assert stored(journal_path) == (set(), set(sent))


def test_a_done_after_a_restart_for_a_job_not_loaded_yet_finishes_it(
    start: Callable[..., Harness],  # noqa: F811
    journal_path: str,  # noqa: F811
) -> None:
    h = start()
    first = modern_worker(h, "first")
    client = h.peer("frontend", "client")
    ran = h.request(client, headers="guarantee")
    other = h.request(client, headers="guarantee")
    assert first.expect("REQUEST")[1] == ran
    stop(h)

    h = start()
    assert monitor(h)["in_memory"] == 0
    back = modern_worker(h, "back", ready=0)
    back.send("DONE", ran, "ok", "{}")  # an outcome it held while disconnected
    assert back.expect("REQUEST")[1] == other  # its freed slot takes the other job only
    back.send("DONE", other, "ok", "{}")
    wait_for(lambda: monitor(h)["queued"] + monitor(h)["in_flight"] == 0, what="the DONEs")
    stop(h)
    assert stored(journal_path) == (set(), {ran, other})

    h = start()  # and a resend of it is a duplicate: it ran
    client = h.peer("frontend", "client")
    client.send("REQUEST", "default", "guarantee", JOB, msgid=ran)
    assert client.expect("ACK")[2] == ran
    assert (monitor(h)["queued"], monitor(h)["duplicates"]) == (0, 1)


def test_a_done_for_a_job_on_disk_while_the_journal_cannot_be_read_keeps_the_job(
    start: Callable[..., Harness],  # noqa: F811
    journal_path: str,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The DONE cannot be matched (the journal cannot be written, so a read would
    miss what it keeps): logged, and the job is handed out again later (at least
    once), not lost."""
    h = start(queue_window=1, journal_busy_timeout=0.01)
    client = h.peer("frontend", "client")
    sent = [h.request(client) for _ in range(3)]  # the first in memory, the others on disk only
    worker = modern_worker(h, "w", ready=0)
    worker.send("READY")
    assert worker.expect("REQUEST")[1] == sent[0]
    other = sqlite3.connect(journal_path)
    try:
        other.execute("BEGIN IMMEDIATE")  # the journal cannot be written now
        worker.send("DONE", sent[0], "ok", "{}")  # kept in memory, not written
        wait_for(lambda: monitor(h)["journal_failure"] is not None, what="the failure")
        with caplog.at_level(logging.WARNING, logger=ROUTER_LOG):
            worker.send("DONE", sent[2], "ok", "{}")
            wait_for(
                lambda: any(sent[2] in r.getMessage() for r in caplog.records),
                what="the DONE to be logged as not applied",
            )
        other.rollback()
    finally:
        other.close()
    got = [worker.expect("REQUEST")[1]]
    worker.send("DONE", got[0], "ok", "{}")
    got.append(worker.expect("REQUEST")[1])
    assert got == sent[1:]  # the unmatched one runs again: at least once


@pytest.mark.parametrize(
    "report",
    [("NACK", "stopping"), ("DONE", "died", "{}"), ("DONE", "retry", "{}")],
    ids=["nack", "died", "retry"],
)
def test_a_report_from_a_job_manager_that_no_longer_holds_the_job_leaves_its_holder(
    start_router: Callable[..., Harness], report: tuple[str, ...]
) -> None:
    """A job outlives its lease on one job manager and is handed to another. A late
    report from the first (it stops, its worker died, it asks for a retry) is
    about a run that is over: the job stays with the job manager running it
    now, no death is counted, and that one's DONE finishes it."""
    # Leases of 2 s: the second one runs out too, long after the checks below.
    h = start_router(job_lease=2.0, lease_grace=0.0)
    client = h.peer("frontend", "client")
    first = modern_worker(h, "first")
    msgid = h.request(client, headers="reply-requested,retry-count:3")
    assert first.expect("REQUEST")[1] == msgid
    wait_for(lambda: monitor(h)["expired"] == 1, what="the lease to run out")
    second = modern_worker(h, "second")
    assert second.expect("REQUEST")[1] == msgid
    first.send(report[0], msgid, *report[1:])

    def taken() -> bool:  # a DONE frees the first one's slot; NACK stopping stops it
        info = shown(h, first) or {}
        return bool(info.get("stopping") or info.get("available_slots") == 1)

    wait_for(taken, what="the report taken")
    info = shown(h, second)
    assert info is not None and info["inflight"] == 1  # still running there
    assert not second.pending()  # not handed out again
    second.send("DONE", msgid, "ok", '{"value": 2}')
    assert client.expect("REPLY")[2:] == ['{"value": 2}', msgid]
    assert monitor(h)["in_flight"] == 0


def test_a_job_manager_that_reconnects_holding_its_job_takes_it_from_its_old_identity(
    start_router: Callable[..., Harness],
) -> None:
    """Our job manager reconnects with a new socket, so a new identity, while the router
    still lists the old one: the jobs its FEATURES say it holds move to the new
    identity. Left on the old one, its timeout counted a death for each and handed
    it out again while it still ran."""
    h = start_router(shutdown_grace=0.0, lease_grace=0.0)
    client = h.peer("frontend", "client")
    old = modern_worker(h, "old")
    msgid = h.request(client, headers="reply-requested")
    assert old.expect("REQUEST")[1] == msgid
    again = holding_worker(h, "again", [msgid])
    wait_for(lambda: (shown(h, again) or {}).get("inflight") == 1, what="the job moved")
    assert (shown(h, old) or {}).get("inflight") == 0
    old.send("KBYE")  # the old identity goes: nothing of its is left to hand out again
    wait_for(lambda: shown(h, old) is None, what="the old identity gone")
    assert monitor(h)["expired"] == 0
    again.send("DONE", msgid, "ok", '{"value": 3}')
    assert client.expect("REPLY")[2:] == ['{"value": 3}', msgid]
