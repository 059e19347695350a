"""The rate bounds on partials: the job manager's (driven with explicit times, no clock)
and the worker child's gate (its sender thread is real)."""

from __future__ import annotations

import pytest

from django_eventmq.jobmanager.partials import Coalescer
from django_eventmq.jobmanager.progress import (
    PARTIAL_INTERVAL,
    PARTIAL_RATE,
    PartialGate,
)
from tests.support import wait_for


@pytest.fixture
def sent() -> list[tuple[str, str]]:
    return []


@pytest.fixture
def gate(sent: list[tuple[str, str]]) -> Coalescer[str]:
    return Coalescer(lambda key, payload: sent.append((key, payload)), interval=0.05)


def test_the_default_rate_is_twenty_a_second():
    assert PARTIAL_RATE == 20
    assert pytest.approx(0.05) == PARTIAL_INTERVAL


def test_a_slow_reporter_gets_every_partial_through_at_once(gate, sent):
    for i, now in enumerate((0.0, 0.1, 0.2, 0.35)):
        gate.offer("a", str(i), now)
    assert sent == [("a", "0"), ("a", "1"), ("a", "2"), ("a", "3")]
    assert len(gate) == 0 and gate.next_due() is None


def test_a_fast_reporter_is_coalesced_to_the_latest_value(gate, sent):
    gate.offer("a", "0", 0.0)
    for i in range(1, 100):
        gate.offer("a", str(i), i * 0.0001)  # 99 more within 10 ms
    assert sent == [("a", "0")]
    assert gate.next_due() == pytest.approx(0.05)
    gate.flush_due(0.049)
    assert sent == [("a", "0")]
    gate.flush_due(0.05)
    assert sent == [("a", "0"), ("a", "99")]
    assert gate.coalesced == 98
    assert gate.next_due() is None


def test_flush_sends_the_held_partial_before_the_outcome(gate, sent):
    gate.offer("a", "0", 0.0)
    gate.offer("a", "1", 0.01)
    gate.flush("a")
    assert sent == [("a", "0"), ("a", "1")]
    gate.flush_due(10.0)  # nothing left to send twice
    assert sent == [("a", "0"), ("a", "1")]
    assert gate.next_due() is None
    gate.flush("a")  # a job with nothing held: nothing sent
    assert len(sent) == 2


def test_each_job_has_its_own_budget(gate, sent):
    gate.offer("a", "a0", 0.0)
    gate.offer("b", "b0", 0.001)
    gate.offer("a", "a1", 0.002)
    gate.offer("b", "b1", 0.003)
    assert sent == [("a", "a0"), ("b", "b0")]
    gate.flush_due(0.0505)
    assert sent == [("a", "a0"), ("b", "b0"), ("a", "a1")]
    gate.flush_due(0.06)
    assert sent[-1] == ("b", "b1")


def test_a_held_partial_waits_a_full_interval_after_the_last_one_sent(gate, sent):
    gate.offer("a", "0", 0.0)
    gate.flush_due(0.06)
    gate.offer("a", "1", 0.07)  # 70 ms after the last send: goes at once
    gate.offer("a", "2", 0.08)
    assert sent == [("a", "0"), ("a", "1")]
    assert gate.next_due() == pytest.approx(0.12)


# -- the worker child's gate (a real thread sends what is held) ----------------------
class Sink:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, str]] = []

    def __call__(self, seq: bytes, text: str) -> None:
        self.sent.append((seq, text))


def test_gate_sends_the_first_report_at_once_and_holds_the_rest():
    sink = Sink()
    gate = PartialGate(sink, interval=60.0)  # no turn comes during the test
    gate.start(b"1")
    for i in range(1000):
        gate.report(str(i))
    assert sink.sent == [(b"1", "0")]
    gate.finish()  # the job is over: the latest held report goes before its result
    assert sink.sent == [(b"1", "0"), (b"1", "999")]
    gate.finish()
    assert len(sink.sent) == 2


def test_gate_thread_sends_a_held_report_when_its_turn_comes():
    sink = Sink()
    gate = PartialGate(sink, interval=0.05)
    gate.start(b"7")
    gate.report("loading")
    gate.report("working")  # then the job works on, reporting nothing more
    wait_for(lambda: len(sink.sent) == 2, 10, "the held report")
    assert sink.sent == [(b"7", "loading"), (b"7", "working")]
    gate.finish()
    assert len(sink.sent) == 2  # nothing held any more


def test_gate_keeps_jobs_apart():
    sink = Sink()
    gate = PartialGate(sink, interval=60.0)
    gate.start(b"1")
    gate.report("a0")
    gate.report("a1")
    gate.finish()
    gate.start(b"2")
    gate.report("b0")  # a new job's first report goes at once
    assert sink.sent == [(b"1", "a0"), (b"1", "a1"), (b"2", "b0")]


def test_a_report_after_the_job_ended_is_dropped():
    """A thread the job left behind may report late: it belongs to no job, so nothing goes out."""
    sink = Sink()
    gate = PartialGate(sink, interval=0.0)
    gate.start(b"3")
    gate.report("during")
    gate.finish()
    gate.report("late")  # the job is over; the next one has not started
    gate.start(b"4")
    assert sink.sent == [(b"3", "during")]
