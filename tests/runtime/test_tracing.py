"""runtime/tracing.py: the trace context in headers, the spans, and tracing off."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from django_eventmq.client.pool import close_clients
from django_eventmq.errors import BrokerUnavailable
from django_eventmq.jobmanager import pipe
from django_eventmq.protocol import parse_headers
from django_eventmq.protocol.frame_fields import request_frames
from django_eventmq.runtime import tracing
from tests.support import tcp_addr
from tests.system.e2e.tracing_jobs import traced_add as add
from tests.tracing_probe.export import in_memory_spans

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with in_memory_spans() as exporter:
        yield exporter


# -- headers ------------------------------------------------------------------------
def test_a_tracestate_list_becomes_one_header_item_per_member_and_back() -> None:
    carrier = {"traceparent": PARENT, "tracestate": "vendor=a:b, other=c"}
    items = tracing.header_items(carrier)
    assert items == [f"traceparent:{PARENT}", "tracestate:vendor=a:b", "tracestate:other=c"]
    assert all("," not in item for item in items)
    # The header parser keeps them as our extension headers, in order.
    headers = parse_headers(",".join(["guarantee", *items]))
    assert headers.guarantee and headers.extra == tuple(items)
    assert tracing.carrier_of(headers.extra) == {
        "traceparent": PARENT,
        "tracestate": "vendor=a:b,other=c",
    }
    assert tracing.raw_carrier(headers.encode().encode()) == tracing.carrier_of(items)


def test_no_traceparent_means_no_carrier() -> None:
    assert tracing.carrier_of(["tracestate:a=b", "attempt:2"]) == {}
    assert tracing.raw_carrier(b"guarantee,timeout:5") == {}
    assert tracing.raw_carrier(b"traceparent:\xff") == {}


def test_stamped_replaces_a_trace_context_the_headers_had() -> None:
    stamp = b"traceparent:new"
    assert tracing.stamped(b"", stamp) == stamp
    assert tracing.stamped(b"guarantee", b"") == b"guarantee"
    old = b"guarantee,traceparent:old,tracestate:a=b,timeout:3"
    assert tracing.stamped(old, stamp) == b"guarantee,timeout:3,traceparent:new"


# -- off ----------------------------------------------------------------------------
def test_without_a_tracer_provider_nothing_is_made() -> None:
    tracing.set_tracer_provider(None)  # the global one: the API's no-op proxy here
    assert tracing.tracer() is None and not tracing.ON
    assert tracing.send_span("default", "m1", "app.jobs.f") is None
    assert tracing.start_accept(b"traceparent:" + PARENT.encode(), "m1", "default") is None
    tracing.end(None)
    carrier = tracing.run_carrier("m1", "default", (f"traceparent:{PARENT}",))
    with tracing.running(carrier):
        tracing.job_named("app.jobs.f")
        tracing.job_failed(ValueError("x"))


# -- the spans ----------------------------------------------------------------------
def test_send_is_a_producer_span_under_the_current_one_and_its_context_is_stamped(
    spans: InMemorySpanExporter,
) -> None:
    with tracing.tracer().start_as_current_span("request"):
        span = tracing.send_span("email", "m1", "app.jobs.f")
        assert span is not None
        span.end()
    send, request = spans.get_finished_spans()
    assert send.name == "send email" and send.kind == SpanKind.PRODUCER
    assert send.parent is not None and send.parent.span_id == request.context.span_id
    assert dict(send.attributes or {}) == {
        "messaging.system": "eventmq",
        "messaging.operation.type": "send",
        "messaging.destination.name": "email",
        "messaging.message.id": "m1",
        "eventmq.job": "app.jobs.f",
    }
    context = send.context
    ids = f"{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
    assert span.stamp == f"traceparent:00-{ids}".encode()


def test_a_send_that_raises_leaves_an_error_span(
    spans: InMemorySpanExporter, eventmq_settings: Any
) -> None:
    eventmq_settings(BROKER_ADDR=tcp_addr(), SEND_TIMEOUT=0.2)  # nothing listens there
    try:
        with pytest.raises(BrokerUnavailable):
            add.delay(1, 2)
    finally:
        close_clients()
    (send,) = spans.get_finished_spans()
    assert send.status.status_code == StatusCode.ERROR
    assert send.status.description.startswith("BrokerUnavailable")
    assert [event.name for event in send.events] == ["exception"]


def test_router_spans_are_children_of_the_jobs_context(spans: InMemorySpanExporter) -> None:
    headers = f"guarantee,traceparent:{PARENT}".encode()
    tracing.end(tracing.start_accept(headers, "m1", "default"))
    tracing.end(tracing.start_accept(headers, "m2", "default"), "journal full")
    tracing.handed_out(request_frames(b"m1", b"default", headers, b"[]"), "m1", "default", "jm-1")
    tracing.handed_out(request_frames(b"m3", b"default", b"", b"[]"), "m3", "default", "jm-1")
    tracing.handed_out([b"not", b"a request"], "m4", "default", "jm-1")
    accept, refused, hand_out = spans.get_finished_spans()
    for span in (accept, refused, hand_out):
        assert span.parent is not None and f"{span.parent.span_id:016x}" == PARENT.split("-")[2]
        assert f"{span.context.trace_id:032x}" == PARENT.split("-")[1]
    assert (accept.name, accept.kind) == ("accept default", SpanKind.CONSUMER)
    assert refused.status.status_code == StatusCode.ERROR
    assert refused.status.description == "journal full"
    assert (hand_out.name, hand_out.kind) == ("hand-out default", SpanKind.PRODUCER)
    assert hand_out.attributes is not None and hand_out.attributes["eventmq.jobmanager"] == "jm-1"
    assert tracing.ON


def test_the_run_carrier_crosses_the_child_pipe_and_parents_the_run_span(
    spans: InMemorySpanExporter,
) -> None:
    extra = (f"traceparent:{PARENT}", "tracestate:a=b", "tracestate:c=d")
    carrier = tracing.run_carrier("m1", "default", extra)
    assert tracing.run_carrier("m1", "default", ("attempt:2",)) == b""
    assert tracing.run_carrier("m\t1", "default", extra) == b""
    assert tracing.run_carrier("m1", "default", ("traceparent:00-a\nb",)) == b""
    data = pipe.encode_job(7, "[]", 3, carrier)
    assert pipe.decode_job_frame(data)[:4] == (b"7", 3, b"[]", carrier)
    assert pipe.decode_job_frame(data)[:3] == (b"7", 3, b"[]")
    assert pipe.decode_job_frame(pipe.encode_job(8, "[1]"))[:4] == (b"8", None, b"[1]", b"")
    with tracing.running(carrier):
        tracing.job_named("app.jobs.f")
        tracing.job_failed(ValueError("bad input"))
    tracing.job_named("after the job: ignored")
    (run,) = spans.get_finished_spans()
    assert (run.name, run.kind) == ("run default", SpanKind.CONSUMER)
    assert run.parent is not None and f"{run.parent.span_id:016x}" == PARENT.split("-")[2]
    assert run.parent.trace_state.get("c") == "d"
    assert run.attributes is not None and run.attributes["eventmq.job"] == "app.jobs.f"
    assert run.attributes["messaging.message.id"] == "m1"
    assert run.status.status_code == StatusCode.ERROR
    assert run.status.description == "ValueError: bad input"
    with tracing.running(b"not a carrier"):
        pass  # malformed: the job runs untraced
    assert len(spans.get_finished_spans()) == 1
