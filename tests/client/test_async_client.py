"""The client from async code and from any thread, with a real router and job
manager: ``await job.adelay()`` and ``await handle.aresult()`` leave the event
loop running; ``.wait()`` works in a thread other than the one that sent."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from django_eventmq.client.handles import JobHandle
from tests.jobs_fixtures import overlap
from tests.jobs_fixtures.limits_stack import pointer, router_and_jobmanager


@pytest.fixture(scope="module")
def frontend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    journal = tmp_path_factory.mktemp("async-client") / "journal.sqlite3"
    with router_and_jobmanager(journal, concurrency=2, module=overlap.MODULE) as (front, _):
        yield front


@pytest.fixture
def client(eventmq_settings: Any, frontend: str) -> Callable[[], None]:
    return pointer(eventmq_settings, frontend)


def test_aresult_awaits_the_value_while_the_loop_keeps_running(
    client: Callable[[], None], tmp_path: Path
) -> None:
    client()
    marker = tmp_path / "runs"

    async def main() -> tuple[list[float], int]:
        ticks = 0
        done = asyncio.Event()

        async def tick() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.create_task(tick())
        handle = await overlap.nap.adelay(2, str(marker), "nap")
        before = ticks
        value = await handle.aresult(timeout=120)
        during = ticks - before
        done.set()
        await ticker
        return value, during

    (start, end, _pid), during = asyncio.run(main())
    assert end - start >= 2
    # A wait that blocked the loop would let the ticker run 0 times in those 2 s.
    assert during >= 20
    assert marker.read_text().split() == ["nap"]  # ran once


def test_many_tasks_send_and_await_at_once(client: Callable[[], None]) -> None:
    client()

    async def one(n: int) -> int:
        handle = await overlap.double.adelay(n)
        value: int = await handle.aresult(timeout=120)
        return value

    async def main() -> list[int]:
        return await asyncio.gather(*(one(n) for n in range(40)))

    assert asyncio.run(main()) == [2 * n for n in range(40)]


def test_wait_in_a_thread_other_than_the_sender(client: Callable[[], None]) -> None:
    """The sender ended: its socket is left open, idle; the main thread, which has
    a socket of its own, reads the sender's."""
    client()
    assert overlap.double.delay(-1).wait(timeout=60) == -2  # our own socket
    handles: list[JobHandle] = []
    sender = threading.Thread(
        target=lambda: handles.extend(overlap.double.delay(n) for n in range(20))
    )
    sender.start()
    sender.join()
    assert [handle.wait(timeout=60) for handle in handles] == [2 * n for n in range(20)]


def test_wait_in_another_thread_while_the_sender_keeps_using_its_socket(
    client: Callable[[], None],
) -> None:
    client()
    passed: queue.Queue[JobHandle] = queue.Queue()
    own: list[int] = []

    def sender() -> None:
        for n in range(50):
            passed.put(overlap.double.delay(n))
        # Then it sends and waits on its own socket while the main thread waits too.
        mine = [overlap.double.delay(1000 + n) for n in range(200)]
        own.extend(handle.wait(timeout=120) for handle in mine)

    thread = threading.Thread(target=sender)
    thread.start()
    theirs = [passed.get(timeout=60).wait(timeout=120) for _ in range(50)]
    thread.join(timeout=180)
    assert theirs == [2 * n for n in range(50)]
    assert own == [2 * (1000 + n) for n in range(200)]
