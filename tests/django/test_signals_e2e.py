"""Job signals end to end: a real router and a job manager whose worker children set
Django up (``--hooks django_eventmq.worker_hooks``) and import receivers of
``django_eventmq.signals``; each job's started, then succeeded, failed or retrying,
comes once per run with its context; ``job_sent`` comes in the sending process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from django_eventmq import JobContext, signals
from django_eventmq.errors import JobError
from django_eventmq.runtime import job_events
from tests.jobs_fixtures import signal_jobs
from tests.support import ROOT, Proc, migrated_env, python_module, wait_for
from tests.system.streaming.conftest import start_router

SETTINGS = "tests.system.streaming.e2e_settings"


class Stack:
    def __init__(self, tmp: Path) -> None:
        self.notes = tmp / "signals.jsonl"
        env = migrated_env(
            {
                "DJANGO_SETTINGS_MODULE": SETTINGS,
                "EMQ_STREAMING_DB": str(tmp / "db.sqlite3"),
                "PYTHONPATH": str(ROOT),
                "SIGNALS_NOTES": str(self.notes),
            }
        )
        self.procs: list[Proc] = []
        router, self.frontend, backend = start_router(tmp / "journal.sqlite3", env=env)
        self.procs.append(router)
        jobmanager = Proc(
            python_module(
                "jobmanager",
                "--broker",
                backend,
                "--concurrency",
                "2",
                "--job-module",
                signal_jobs.MODULE,
                "--hooks",
                "django_eventmq.worker_hooks",
            ),
            env=env,
        )
        self.procs.append(jobmanager)
        jobmanager.wait_output(r"jobmanager ready: ", timeout=60)

    def seen(self) -> list[dict[str, Any]]:
        if not self.notes.exists():
            return []
        return [json.loads(line) for line in self.notes.read_text().splitlines()]

    def of(self, msgid: str) -> list[tuple[str, int, int]]:
        """``(signal, attempt, retries left)`` of each signal job ``msgid`` sent, in order."""
        return [
            (n["signal"], n["attempt"], n["retries_left"])
            for n in self.seen()
            if n["msgid"] == msgid
        ]

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = Stack(tmp_path_factory.mktemp("signals-e2e"))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def client(eventmq_settings: Any, stack: Stack) -> Stack:
    eventmq_settings(BROKER_ADDR=stack.frontend, ACK_TIMEOUT=5)
    return stack


def test_each_run_sends_started_then_succeeded_with_its_result(client: Stack) -> None:
    handles = [signal_jobs.doubles.delay(n) for n in range(10)]
    assert [h.wait(timeout=60) for h in handles] == [n * 2 for n in range(10)]
    for n, handle in enumerate(handles):
        wait_for(lambda h=handle: len(client.of(str(h))) == 2, 30, f"two signals of job {n}")
        started, succeeded = (x for x in client.seen() if x["msgid"] == str(handle))
        assert (started["signal"], succeeded["signal"]) == ("started", "succeeded")
        assert succeeded["result"] == n * 2 and succeeded["sender_is_job"]
        assert succeeded["name"] == f"{signal_jobs.MODULE}.doubles"


def test_a_failure_sends_job_failed_with_the_exception(client: Stack) -> None:
    handle = signal_jobs.breaks.delay(7)
    with pytest.raises(JobError):
        handle.wait(timeout=60)
    wait_for(lambda: len(client.of(str(handle))) == 2, 30, "the failure's signals")
    assert client.of(str(handle)) == [("started", 1, 0), ("failed", 1, 0)]
    [failed] = [x for x in client.seen() if x["msgid"] == str(handle) and x["signal"] == "failed"]
    assert (failed["exception"], failed["message"]) == ("ValueError", "broke on 7")


def test_a_retried_run_sends_job_retrying_then_the_next_run_its_own(client: Stack) -> None:
    handle = signal_jobs.second_time_lucky.delay(3)
    assert handle.wait(timeout=60) == 3
    wait_for(lambda: len(client.of(str(handle))) == 4, 30, "both runs' signals")
    assert client.of(str(handle)) == [
        ("started", 1, 1),
        ("retrying", 1, 1),
        ("started", 2, 0),
        ("succeeded", 2, 0),
    ]


def test_async_jobs_running_at_once_send_their_own_signals(client: Stack) -> None:
    broken = signal_jobs.async_breaks.delay(7)
    others = [signal_jobs.async_doubles.delay(n) for n in range(6)]
    with pytest.raises(JobError):
        broken.wait(timeout=60)
    assert [h.wait(timeout=60) for h in others] == [n * 2 for n in range(6)]
    wait_for(lambda: len(client.of(str(broken))) == 2, 30, "the failure's signals")
    assert client.of(str(broken)) == [("started", 1, 0), ("failed", 1, 0)]
    retried, *plain = others
    wait_for(lambda: len(client.of(str(retried))) == 4, 30, "both runs' signals")
    assert client.of(str(retried)) == [
        ("started", 1, 1),
        ("retrying", 1, 1),
        ("started", 2, 0),
        ("succeeded", 2, 0),
    ]
    for n, handle in enumerate(plain, 1):
        wait_for(lambda h=handle: len(client.of(str(h))) == 2, 30, f"two signals of job {n}")
        started, succeeded = (x for x in client.seen() if x["msgid"] == str(handle))
        assert (started["signal"], succeeded["signal"]) == ("started", "succeeded")
        assert succeeded["result"] == n * 2


def test_job_sent_comes_in_the_sending_process_with_the_context(client: Stack) -> None:
    got: list[tuple[Any, JobContext]] = []

    def on_sent(sender: Any, context: JobContext, **kwargs: Any) -> None:
        got.append((sender, context))

    signals.job_sent.connect(on_sent)
    try:
        handle = signal_jobs.doubles.send((4,), queue="default")
    finally:
        signals.job_sent.disconnect(on_sent)
    [(sender, context)] = got
    assert sender is signal_jobs.doubles
    assert (context.msgid, context.queue, context.args, context.attempt) == (
        str(handle),
        "default",
        (4,),
        1,
    )
    assert handle.wait(timeout=60) == 8


class _Unbuilt:
    """A job whose context must not be built (nobody listens)."""

    def context(self) -> JobContext:
        raise AssertionError("the context was built with no receiver connected")


def test_a_signal_nobody_listens_to_builds_nothing() -> None:
    listener = job_events.listener
    assert listener is not None  # importing django_eventmq.signals installed it
    assert not signals.job_sent.receivers
    listener.sent(_Unbuilt())  # type: ignore[arg-type]
