"""The parts of the client that own their state, checked alone: the send path's
header stages (client/stages.py, expiry.py, unique.py), what a pipeline has not had
answered (unanswered.py) and the FEATURES handshake shared by a client and its
pipeline (handshake.py; shared: tests/client/test_batch_send.py)."""

from __future__ import annotations

from django_eventmq.client.bulk import Pipeline
from django_eventmq.client.expiry import Expiry
from django_eventmq.client.handshake import Handshake
from django_eventmq.client.stages import build_headers, header_stages, waits_for_answer
from django_eventmq.client.unanswered import SentBatch, Unanswered
from django_eventmq.client.unique import Unique
from django_eventmq.protocol import Headers
from django_eventmq.runtime import transport

NOW = 1_700_000_000.0
BASE = Headers(timeout=20)


def test_a_job_without_feature_options_has_no_stage_and_keeps_its_headers() -> None:
    fields = {"timeout": 20}
    assert header_stages("f", "m.f", fields) == ()
    assert fields == {"timeout": 20}
    assert build_headers((), BASE, ((1,), {})) is BASE


def test_the_stages_take_their_options_and_run_in_order() -> None:
    fields = {"expires": 60, "unique_for": 5, "timeout": 20}
    stages = header_stages("f", "m.f", fields)
    assert [type(s) for s in stages] == [Expiry, Unique] and fields == {"timeout": 20}
    sent = build_headers(stages, BASE, ((1,), {"a": 2}), NOW)
    assert (sent.expires, sent.unique_for, sent.timeout) == (NOW + 60, 5, 20)
    assert sent.unique_key is not None and waits_for_answer(sent)
    assert not waits_for_answer(BASE)


def test_an_expiry_or_key_given_by_the_send_is_kept() -> None:
    key = "ab" * 8
    given = BASE.with_(expires=NOW + 1, unique_key=key)
    stages = (Expiry(60), Unique("m.f", 5, None))
    sent = build_headers(stages, given, ((), {}), NOW)
    assert (sent.expires, sent.unique_key, sent.unique_for) == (NOW + 1, key, 5)
    # Arguments not known (headers_for): no key is made.
    assert build_headers(stages, BASE, None, NOW).unique_key is None


def test_unanswered_jobs_leave_as_the_router_refuses_them() -> None:
    unanswered = Unanswered()
    assert not unanswered.any and unanswered.oldest_sent() is None
    unanswered.requests[b"r"] = (b"q1", b"", b"body", 5.0)
    batch = SentBatch({b"b1": (b"q2", b"", b"x"), b"b2": (b"q2", b"", b"y")}, 3.0)
    unanswered.add_batch(b"B", batch)
    assert (unanswered.jobs, unanswered.oldest_sent(), unanswered.queues()) == (
        3,
        3.0,
        ["q1", "q2"],
    )
    assert unanswered.refused(b"b1") == b"q2" and unanswered.refused(b"b2") == b"q2"
    assert b"B" not in unanswered.batches  # all refused: its ACK says nothing more
    assert unanswered.refused(b"r") == b"q1" and unanswered.refused(b"?") is None
    assert not unanswered.any


def test_a_pipeline_given_known_features_asks_nothing() -> None:
    channel = transport.Channel(transport.DEALER, connect="tcp://127.0.0.1:9")
    try:
        handshake = Handshake(channel, wait=1.0, known={"batch": 1})
        assert handshake.router_features == {"batch": 1} and not handshake.unsent
        sender = Pipeline(channel, addr="x", batch=10, handshake=handshake)
        assert sender.router_features == {"batch": 1} and sender.batching
    finally:
        channel.close()
