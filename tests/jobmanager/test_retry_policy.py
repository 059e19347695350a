"""Per-job retry policy (runtime/retry_policy.py): the pure parts, the child's advice,
the job manager's decision and the router's delay, without processes."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_eventmq import Retry
from django_eventmq.client.jobs import job
from django_eventmq.errors import ConfigurationError, EventMQError
from django_eventmq.jobmanager.job_runner import JobRunner
from django_eventmq.jobmanager.lifecycle import Lifecycle
from django_eventmq.jobmanager.managed_job import ManagedJob
from django_eventmq.jobmanager.outcomes import Recorder
from django_eventmq.jobmanager.pool import Pool
from django_eventmq.protocol import Headers, JobBody, Request, codec
from django_eventmq.protocol.status import JobStatus
from django_eventmq.router.book import Book
from django_eventmq.router.journal.store import MEMORY, Journal
from django_eventmq.runtime import retry_policy
from django_eventmq.runtime.retry import backoff
from django_eventmq.runtime.retry_policy import (
    EXHAUSTED,
    NOT_RETRYABLE,
    RetryPolicy,
    advice,
    decide,
    delay_in_payload,
    jittered,
    policy_from_options,
)
from django_eventmq.runtime.settings import Settings
from tests.system.e2e import retry_jobs

JOBS = retry_jobs.MODULE


# -- jitter: a pure function of the draw ---------------------------------------------
@given(
    attempt=st.integers(min_value=-5, max_value=5000),
    base=st.floats(min_value=1e-6, max_value=1e9),
    cap=st.floats(min_value=1e-6, max_value=1e9),
    jitter=st.sampled_from(retry_policy.JITTERS),
    rand=st.floats(min_value=0.0, max_value=1.0),
)
def test_a_delay_is_never_negative_nor_above_the_cap(attempt, base, cap, jitter, rand):
    delay = jittered(attempt, base, cap, jitter, rand)
    assert math.isfinite(delay)
    assert 0.0 <= delay <= cap


@given(
    attempt=st.integers(min_value=1, max_value=60),
    base=st.floats(min_value=0.01, max_value=100),
    cap=st.floats(min_value=0.01, max_value=1000),
    rand=st.floats(min_value=0.0, max_value=1.0),
)
def test_equal_jitter_keeps_at_least_half_and_none_is_the_global_backoff(attempt, base, cap, rand):
    ceiling = backoff(attempt, base, cap)
    assert jittered(attempt, base, cap, "none", rand) == ceiling
    assert ceiling / 2 <= jittered(attempt, base, cap, "equal", rand) <= ceiling
    assert jittered(attempt, base, cap, "full", rand) == pytest.approx(ceiling * rand)


def test_full_jitter_spans_zero_to_the_ceiling():
    assert jittered(3, 1.0, 100.0, "full", 0.0) == 0.0
    assert jittered(3, 1.0, 100.0, "full", 0.5) == 2.0
    assert jittered(30, 1.0, 100.0, "full", 1.0) == 100.0


# -- the decision --------------------------------------------------------------------
def _never() -> float:
    raise AssertionError("no jitter asked for: no draw")


def test_decide_without_advice_is_the_global_backoff_until_retries_run_out():
    for attempt in (1, 2, 3):
        made = decide(attempt, 3, {}, base=2, cap=5, rand=_never)
        assert made == (True, min(5, 2 * 2 ** (attempt - 1)), "retry", False)
    assert decide(4, 3, {}, base=2, cap=5, rand=_never) == (False, 0.0, EXHAUSTED, False)


def test_decide_not_retryable_fails_at_once_even_with_retries_left():
    assert decide(1, 5, {"allowed": False}, base=1, cap=9, rand=_never).why == NOT_RETRYABLE


def test_decide_a_retry_asked_for_uses_that_delay_and_a_retry_count():
    made = decide(1, 1, {"in": 30}, base=1, cap=2, rand=_never)
    assert (made.retry, made.delay, made.custom) == (True, 30.0, True)
    assert decide(2, 1, {"in": 30}, base=1, cap=2, rand=_never).why == EXHAUSTED


def test_decide_uses_the_policy_backoff_cap_and_jitter():
    made = decide(4, 9, {"base": 1, "max": 5, "jitter": "full"}, base=9, cap=99, rand=lambda: 0.5)
    assert made == (True, 2.5, "retry", True)  # min(5, 1 * 2**3) * 0.5
    bad = decide(1, 9, {"base": -1, "max": "x", "jitter": "weird"}, base=3, cap=99, rand=_never)
    assert bad.delay == 3.0  # unreadable advice: the global back-off


# -- @job options ----------------------------------------------------------------------
def test_policy_from_options_pops_its_options_and_checks_them():
    options: dict[str, Any] = {"retry_on": KeyError, "retry_jitter": True, "timeout": 5}
    policy = policy_from_options(options, 3)
    assert options == {"timeout": 5}
    assert policy == RetryPolicy(retry_on=(KeyError,), jitter="full")
    assert policy_from_options({"timeout": 5}, 3) is None


@pytest.mark.parametrize(
    ("options", "retry_count", "says"),
    [
        ({"retry_on": KeyError}, 0, "need retry_count=N"),
        ({"retry_on": "KeyError"}, 2, "takes exception classes"),
        ({"retry_on": (KeyError, 3)}, 2, "takes exception classes"),
        ({"retry_backoff": 0}, 2, "> 0"),
        ({"retry_backoff": True}, 2, "takes seconds"),
        ({"retry_max_delay": math.inf}, 2, "finite"),
        ({"retry_jitter": "half"}, 2, "'full' or 'equal'"),
    ],
)
def test_bad_policy_options_are_refused_saying_how_to_fix(options, retry_count, says):
    with pytest.raises(ConfigurationError, match=says):
        policy_from_options(dict(options), retry_count)


def _module_level() -> None: ...


def test_the_decorator_refuses_a_policy_without_retries():
    with pytest.raises(ConfigurationError, match="@job _module_level: retry_on= need retry_count"):
        job(retry_on=KeyError)(_module_level)


def test_retry_is_one_of_ours_and_checks_its_arguments():
    assert issubclass(Retry, EventMQError)
    assert Retry(in_=timedelta(minutes=1)).in_ == 60.0
    with pytest.raises(ConfigurationError, match="not both"):
        Retry(in_=1, at=datetime.now(UTC))
    with pytest.raises(ConfigurationError, match=">= 0"):
        Retry(in_=-1)
    with pytest.raises(ConfigurationError, match="aware datetime"):
        Retry(at=datetime(2030, 1, 1))
    assert str(Retry(in_=30, reason="busy")) == "the job asked to be retried in 30s: busy"


# -- the child's advice ----------------------------------------------------------------
def test_advice_follows_the_jobs_policy():
    name = retry_jobs.flaky.name
    assert advice(name, ConnectionError(), 0.0) == {"base": 0.1, "max": 0.2}
    assert advice(name, ValueError(), 0.0) == {"allowed": False}
    assert advice(name, Retry(in_=3), 0.0) == {"in": 3.0}  # Retry always retries
    assert advice(name, Retry(), 0.0) == {"base": 0.1, "max": 0.2}
    at = datetime.fromtimestamp(1000.0, UTC)
    assert advice(name, Retry(at=at), 990.0) == {"in": 10.0}
    assert advice(name, Retry(at=at), 2000.0) == {"in": 0.0}  # past: at once
    assert advice("not.a.job", ValueError(), 0.0) == {}  # no policy: the default


def _run(runner: JobRunner, body: JobBody) -> tuple[str, dict[str, Any]]:
    status, payload = runner.run(body.encode())
    return status, json.loads(payload)


def test_the_child_sends_its_advice_with_the_failure(tmp_path):
    runner = JobRunner()
    path = str(tmp_path / "runs")
    status, info = _run(runner, JobBody(path=JOBS, callable="wrong_kind", args=(path,)))
    assert (status, info["type"], info["retry"]) == ("failed", "ValueError", {"allowed": False})
    body = JobBody(path=JOBS, callable="asks_again", args=(str(tmp_path / "s"), 1, 2.5))
    status, info = _run(runner, body)
    assert (status, info["type"], info["retry"]) == ("failed", "Retry", {"in": 2.5})
    # An async job raising Retry: the same advice.
    body = JobBody(path=JOBS, callable="async_asks_again", args=(str(tmp_path / "a"), 1, 4))
    status, info = _run(runner, body)
    assert (status, info["type"], info["retry"]) == ("failed", "Retry", {"in": 4.0})


# -- the job manager -------------------------------------------------------------------
def _lifecycle(settings: Settings, *, router_retries: bool) -> tuple[Lifecycle, list[Any]]:
    reports: list[Any] = []
    life = Lifecycle(
        settings,
        Pool(settings),  # never started: no job here reaches a child
        Recorder("jm"),
        report=lambda job, status, payload: reports.append((status, job.attempt, payload)),
        nack=lambda job, why: None,
        router_retries=lambda: router_retries,
    )
    life.random = lambda: 0.5
    return life, reports


def _failure(kind: str, retry: dict[str, Any] | None) -> str:
    info: dict[str, Any] = {"job": "x.y", "type": kind, "message": "m", "traceback": ""}
    if retry is not None:
        info["retry"] = retry
    return json.dumps(info)


def _managed(retry_count: int) -> ManagedJob:
    body = JobBody(path=JOBS, callable="flaky", args=("/nowhere", 9)).encode()
    return ManagedJob(
        msgid="m1", queue="q", body_text=body, reply_requested=True, retry_count=retry_count
    )


def test_job_manager_fails_a_not_retryable_exception_at_once():
    life, reports = _lifecycle(Settings(), router_retries=True)
    life.accept(_managed(5))
    life.finish([(life.pending.popleft(), "failed", _failure("ValueError", {"allowed": False}))], 1)
    [(status, attempt, payload)] = reports
    assert (status, attempt, json.loads(payload)["error"]["type"]) == ("failed", 1, "ValueError")


def test_job_manager_tells_our_router_the_policy_delay():
    life, reports = _lifecycle(Settings(), router_retries=True)
    life.accept(_managed(5))
    advice_ = {"base": 4, "max": 10, "jitter": "equal"}
    life.finish([(life.pending.popleft(), "failed", _failure("ConnectionError", advice_))], 1)
    [(status, attempt, payload)] = reports
    assert (status, attempt) == (JobStatus.RETRY, 1)
    assert delay_in_payload(payload) == 3.0  # 4 * 2**0 = 4, equal jitter at 0.5: 2 + 1
    # No advice (no policy): the router keeps applying its own back-off.
    life.accept(_managed(5))
    life.finish([(life.pending.popleft(), "failed", _failure("RuntimeError", None))], 1)
    assert delay_in_payload(reports[-1][2]) is None


def test_job_manager_retrying_itself_waits_the_asked_delay_and_counts_the_attempt():
    life, reports = _lifecycle(Settings(), router_retries=False)  # a reference router
    job_ = _managed(1)
    life.accept(job_)
    seq = life.pending.popleft()
    life.finish([(seq, "failed", _failure("Retry", {"in": 7}))], 100.0)
    assert life.next_retry() == 107.0 and job_.attempt == 2 and reports == []
    life.due_retries(107.0)
    life.finish([(life.pending.popleft(), "failed", _failure("Retry", {"in": 7}))], 108.0)
    [(status, attempt, _)] = reports  # retry_count=1 is used up: Retry stops too
    assert (status, attempt) == (JobStatus.FAILED, 2)


# -- the router -------------------------------------------------------------------------
def test_router_holds_a_retry_for_the_delay_its_job_manager_asked():
    book = Book(
        Settings(retry_backoff_base=100, retry_backoff_cap=100),
        Journal(MEMORY),
        deliver=lambda w, j: True,
        to_client=lambda identity, message: None,
    )
    book.routing.add_worker(b"jm", ((10, "default"),), 0.0)
    book.reports.ready(b"jm", 0.0)
    request = Request(msgid="r1", queue="default", headers=Headers(retry_count=3), body_text="x")
    assert book.accept(b"c", codec.encode(request), "r1", "default", request.headers, 0.0)
    payload = json.dumps({"value": "m", "attempt": 1, "error": {}, "retry_in": 0.5})
    before = __import__("time").time()
    book.reports.done(b"jm", "r1", JobStatus.RETRY, payload, 1.0)
    due = book.next_due()
    assert due is not None and due - before < 50  # 0.5 s, not the router's 100 s
    assert book.delays.delayed["default"] == 1


@pytest.mark.parametrize("payload", ["{}", "not json", '{"retry_in": -1}', '{"retry_in": "x"}'])
def test_a_missing_or_bad_retry_in_is_ignored(payload):
    assert delay_in_payload(payload) is None
