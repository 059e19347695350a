"""Two router groups (shards), each its own leader and PostgreSQL schema, one job manager.

- Jobs of both groups run: a bulk sender and ``.delay()`` clients spread them by
  queue, the job manager (one link per group) runs both groups' jobs.
- SIGKILL of one group's router while a bulk sender sends: the jobs it had not
  acknowledged, and every new job, go to the other group; nothing is lost.
- Jobs a killed group had stored run once a router of it (its standby's place)
  is back: the job manager's link of that group finds it.

Every job appends its msgid to a file: each must be there at least once;
duplicates (a job stored by the killed group and resent to the other) are counted.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from django_eventmq.client.pool import connect
from django_eventmq.client.shards import ShardedClient
from tests.pg_support import pg_dsn  # noqa: F401 - fixture
from tests.support import wait_for
from tests.system.chaos.support import body, recorded, wait_recorded
from tests.system.shards.support import Shards, queue_of_group

pytestmark = pytest.mark.postgres

QA, QB = queue_of_group(0), queue_of_group(1)


@pytest.fixture
def shards(pg_dsn: str, tmp_path: Path) -> Iterator[Shards]:  # noqa: F811
    made = Shards(pg_dsn, tmp_path)
    try:
        yield made
    finally:
        made.stop()
        print(made.outputs())  # shown when the test failed


def client(shards: Shards) -> ShardedClient:
    made = connect(shards.broker, send_timeout=1.0)
    assert isinstance(made, ShardedClient)
    return made


def jobs(
    prefix: str, count: int, queues: tuple[str, ...]
) -> list[tuple[bytes, bytes, bytes, bytes]]:
    return [
        (
            f"{prefix}-{n}".encode(),
            queues[n % len(queues)].encode(),
            b"guarantee",
            body(f"{prefix}-{n}"),
        )
        for n in range(count)
    ]


def both_linked(shards: Shards) -> None:
    jm = shards.others[-1]
    for group in shards.groups:
        jm.wait_output(f"jobmanager connected to {group.backends['a']}", 30)


def test_jobs_of_both_groups_run_on_one_jobmanager(shards: Shards) -> None:
    shards.jobmanager(f"{QA}:10,{QB}:10")
    both_linked(shards)
    sender = client(shards)
    try:
        result = sender.send_many(jobs("bulk", 400, (QA, QB)), window=200, ack_timeout=2.0)
    finally:
        sender.close()
    assert result.acked == 400 and not result.rejected
    delayed = shards.delay_client("delay", 100, f"{QA},{QB}")
    delayed.wait_output(r"sent 100", 60)
    expected = {f"bulk-{n}" for n in range(400)} | {f"delay-{n}" for n in range(100)}
    wait_recorded(shards.record, expected, 60)
    # Each group got the jobs of its queue, and its router saw them finish.
    first, second = (g.processed("a") for g in shards.groups)
    assert first.get(QA) == 250 and QB not in first, first
    assert second.get(QB) == 250 and QA not in second, second


def test_round_robin_spreads_one_queue_over_both_groups(shards: Shards) -> None:
    shards.jobmanager(f"{QA}:10")
    both_linked(shards)
    made = connect(shards.broker, send_timeout=1.0, shard_by="round_robin")
    try:
        result = made.send_many(jobs("rr", 200, (QA,)), window=100, ack_timeout=2.0)
    finally:
        made.close()
    assert result.acked == 200
    wait_recorded(shards.record, {f"rr-{n}" for n in range(200)}, 60)
    assert [g.processed("a").get(QA) for g in shards.groups] == [100, 100]


def test_a_killed_group_loses_nothing_and_its_stored_jobs_run_when_it_is_back(
    shards: Shards,
) -> None:
    one, two = shards.groups
    # Jobs the first group stores while no job manager runs: they wait in its journal.
    sender = client(shards)
    try:
        stored = sender.send_many(jobs("stored", 100, (QA,)), window=100, ack_timeout=2.0)
        assert stored.acked == 100
        one.kill("a")
        # New jobs of its queue go to the second group: bulk and .delay().
        moved = sender.send_many(jobs("moved", 300, (QA, QB)), window=100, ack_timeout=1.0)
        assert moved.acked == 300
    finally:
        sender.close()
    delayed = shards.delay_client("delay", 60, QA)
    delayed.wait_output(r"sent 60", 60)
    assert "is not taking jobs" in delayed.output()  # it skipped the first group
    jm = shards.jobmanager(f"{QA}:10,{QB}:10")
    jm.wait_output(f"jobmanager connected to {two.backends['a']}", 30)
    after_kill = {f"moved-{n}" for n in range(300)} | {f"delay-{n}" for n in range(60)}
    wait_recorded(shards.record, after_kill, 60)
    assert two.processed("a").get(QA, 0) >= 150 + 60
    ran = set(recorded(shards.record))
    assert not {f"stored-{n}" for n in range(100)} & ran  # still in the first group only
    # The first group's standby (its second member's place) comes back and leads:
    # the job manager's link of that group moves on to it and gets its stored jobs.
    one.start("b")
    jm.wait_output(f"jobmanager connected to {one.backends['b']}", 30)
    wait_recorded(shards.record, {f"stored-{n}" for n in range(100)} | after_kill, 60)
    counts = Counter(recorded(shards.record))
    twice = sum(1 for n in counts.values() if n > 1)
    print(f"460 jobs, {twice} ran more than once")


def test_a_group_killed_under_load_hands_its_unacknowledged_jobs_to_the_other(
    shards: Shards,
) -> None:
    one, two = shards.groups
    shards.jobmanager(f"{QA}:10,{QB}:10")
    both_linked(shards)
    total, chunk = 2000, 200

    def ran() -> int:
        return len(set(recorded(shards.record)))

    def killer() -> None:
        wait_for(lambda: ran() >= total // 4, 120, "a quarter of the jobs to run", poll=0.02)
        one.kill("a")

    thread = threading.Thread(target=killer, name="killer")
    thread.start()
    sender = client(shards)
    acked = resent = 0
    try:
        for start in range(0, total, chunk):
            wait_for(lambda s=start: s - ran() < 2 * chunk, 120, "the job manager to catch up")
            part = jobs("load", total, (QA, QB))[start : start + chunk]
            result = sender.send_many(part, window=chunk, ack_timeout=1.0, give_up=60)
            acked, resent = acked + result.acked, resent + result.resent
    finally:
        thread.join()
        sender.close()
    assert acked == total
    assert sender.down[0]
    # The first group's queue went on in the second group after the kill.
    wait_for(lambda: two.processed("a").get(QA, 0) > 0, 30, "QA jobs run by the second group")
    one.start("b")  # what the killed router had stored runs once its group is back
    wait_recorded(shards.record, {f"load-{n}" for n in range(total)}, 120)
    counts = Counter(recorded(shards.record))
    twice = sum(1 for n in counts.values() if n > 1)
    print(f"{total} jobs, {resent} resent or moved to the other group, {twice} ran more than once")
