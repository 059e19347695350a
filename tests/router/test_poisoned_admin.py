"""POISONED_RETRY and POISONED_PURGE on the admin socket of a real router (SQLite
journal): a retried job is handed out again with its deaths reset, a purged one is
gone from STATUS, MONITOR and the journal (after a restart too); other msgids are
left alone and said so."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.router.test_router import Harness, Peer
from tests.router.test_router_journal import journal_path as journal_path
from tests.router.test_router_journal import modern_worker, monitor, start, stop
from tests.support import wait_for

__all__ = ["start"]  # the fixture, used by name

DIED = "worker process exited with signal 9"


def admin(h: Harness, command: str, *msgids: str) -> dict[str, Any]:
    h.admin.send(command, h.token_frame(), *msgids)
    return json.loads(h.admin.expect("REPLY")[2])  # type: ignore[no-any-return]


def poison(h: Harness, worker: Peer, client: Peer) -> str:
    """A job whose worker dies twice (poison_after=2): set aside."""
    msgid = h.request(client, headers="guarantee")
    for _ in range(2):
        assert worker.expect("REQUEST")[1] == msgid
        worker.send("DONE", msgid, "died", DIED)
    assert client.expect("REJECT")[2] == msgid
    return msgid


def test_a_retried_poisoned_job_is_handed_out_again_with_its_deaths_reset(
    start: Callable[..., Harness],
) -> None:
    h = start(poison_after=2)
    worker = modern_worker(h, "w")
    client = h.peer("frontend", "client")
    msgid = poison(h, worker, client)
    status = h.ask("STATUS")
    assert [p["msgid"] for p in status["poisoned_messages"]] == [msgid]
    assert status["poisoned_messages_total"] == 1
    assert admin(h, "POISONED_RETRY", msgid, "not-held") == {"retried": [msgid]}
    assert worker.expect("REQUEST")[1] == msgid
    assert h.ask("STATUS")["poisoned_messages"] == [] and monitor(h)["poisoned"] == 0
    worker.send("DONE", msgid, "died", DIED)  # one death: not poisoned again (deaths reset)
    assert worker.expect("REQUEST")[1] == msgid
    worker.send("DONE", msgid, "ok", "{}")
    wait_for(lambda: monitor(h)["in_flight"] == 0, what="the DONE")
    assert monitor(h)["poisoned"] == 0
    assert admin(h, "POISONED_RETRY", msgid) == {"retried": []}  # finished: nothing to do


def test_a_purged_poisoned_job_is_gone_from_status_and_the_journal(
    start: Callable[..., Harness],
) -> None:
    h = start(poison_after=2)
    worker = modern_worker(h, "w")
    client = h.peer("frontend", "client")
    first, second = poison(h, worker, client), poison(h, worker, client)
    assert admin(h, "POISONED_PURGE", first) == {"purged": [first]}
    status = h.ask("STATUS")
    assert [p["msgid"] for p in status["poisoned_messages"]] == [second]
    assert (status["poisoned_messages_total"], monitor(h)["poisoned"]) == (1, 1)
    stop(h)
    h = start(poison_after=2)
    assert [p["msgid"] for p in h.ask("STATUS")["poisoned_messages"]] == [second]
    assert admin(h, "POISONED_PURGE", first) == {"purged": []}
    assert monitor(h)["queued"] == 0  # neither was handed out again
