"""Tracing end to end: one trace across the client, a router and a job manager.

The test process is the client (a Django request, through the test client,
whose span comes from opentelemetry-instrumentation-django, and the send span
inside it); the router and the job
manager (with its spawned worker children) are real processes that export
their spans through ``tests/tracing_probe`` (on their PYTHONPATH) into JSON
line files the test reads.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from django.test import Client
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from django_eventmq.client.handles import JobHandle
from django_eventmq.errors import JobError
from django_eventmq.runtime import tracing
from tests.support import ROOT, wait_for
from tests.system.e2e.stack import RouterStack, serving
from tests.system.e2e.tracing_jobs import traced_add, traced_fail
from tests.tracing_probe.export import in_memory_spans, read_spans, span_record

PROBE = ROOT / "tests" / "tracing_probe"


@pytest.fixture
def client_spans() -> Iterator[InMemorySpanExporter]:
    """This process's spans, in memory."""
    with in_memory_spans() as exporter:
        yield exporter


@pytest.fixture
def stack(tmp_path: Path, eventmq_settings: Any) -> Iterator[Path]:
    """A router and a job manager exporting spans into the returned directory."""
    spans = tmp_path / "spans"
    spans.mkdir()
    env = {"TRACE_PROBE_DIR": str(spans), "PYTHONPATH": os.pathsep.join((str(PROBE), str(ROOT)))}
    with serving(
        RouterStack(tmp_path, "tests.system.e2e.tracing_jobs", env), eventmq_settings
    ) as s:
        s.start_jobmanager(concurrency=1)
        yield spans


def _trace_of(spans: list[dict[str, Any]], trace_id: str) -> dict[str, dict[str, Any]]:
    """The spans of one trace by name (each name once)."""
    found: dict[str, dict[str, Any]] = {}
    for span in spans:
        if span["trace_id"] == trace_id:
            assert span["name"] not in found, f"two {span['name']!r} spans: {spans}"
            found[span["name"]] = span
    return found


def _wait_spans(directory: Path, trace_id: str, names: set[str]) -> dict[str, dict[str, Any]]:
    return wait_for(  # type: ignore[no-any-return]
        lambda: (found := _trace_of(read_spans(directory), trace_id)).keys() >= names and found,
        20,
        what=f"spans {sorted(names)} of trace {trace_id}",
    )


@pytest.fixture
def instrumented_django(client_spans: InMemorySpanExporter, settings: Any) -> Iterator[Client]:
    """A Django test client whose requests have spans (opentelemetry-instrumentation-django,
    on this test's tracer provider) and reach ``tracing_urls``."""
    django_otel = pytest.importorskip("opentelemetry.instrumentation.django")
    settings.ROOT_URLCONF = "tests.system.e2e.tracing_urls"
    instrumentor = django_otel.DjangoInstrumentor()
    instrumentor.instrument(tracer_provider=tracing._provider)
    try:
        yield Client()  # made after instrument(): its handler loads the span middleware
    finally:
        instrumentor.uninstrument()


def test_one_trace_links_the_request_send_accept_hand_out_and_run(
    stack: Path, client_spans: InMemorySpanExporter, instrumented_django: Client
) -> None:
    response = instrumented_django.get("/signup")
    assert response.status_code == 200
    handle = JobHandle(response.content.decode())
    assert handle.wait(timeout=30) == 5
    local = {span.name: span_record(span) for span in client_spans.get_finished_spans()}
    request, send = local["GET signup"], local["send default"]
    assert request["kind"] == "SERVER"
    trace_id = request["trace_id"]
    remote = _wait_spans(stack, trace_id, {"accept default", "hand-out default", "run default"})
    accept, hand_out, run = (
        remote["accept default"],
        remote["hand-out default"],
        remote["run default"],
    )
    inside = remote["inside the job"]

    # Three processes: the router's two spans, the worker child's run (not the job manager's).
    assert accept["pid"] == hand_out["pid"] != run["pid"]
    assert os.getpid() not in {accept["pid"], run["pid"]}
    # The links: request -> send -> {accept, hand-out, run} -> the job's own span.
    assert send["parent_id"] == request["span_id"]
    for span in (accept, hand_out, run):
        assert span["parent_id"] == send["span_id"], span
    assert inside["parent_id"] == run["span_id"]
    assert (send["kind"], accept["kind"], hand_out["kind"], run["kind"]) == (
        "PRODUCER", "CONSUMER", "PRODUCER", "CONSUMER",
    )  # fmt: skip
    for span in (send, accept, hand_out, run):
        assert span["attributes"]["messaging.message.id"] == str(handle), span
        assert span["attributes"]["messaging.system"] == "eventmq"
        assert span["attributes"]["messaging.destination.name"] == "default"
    assert send["attributes"]["eventmq.job"] == run["attributes"]["eventmq.job"] == traced_add.name
    assert hand_out["attributes"]["eventmq.jobmanager"]
    assert run["status"] == "UNSET"


def test_a_failing_jobs_run_span_carries_the_error(
    stack: Path, client_spans: InMemorySpanExporter
) -> None:
    handle = traced_fail.delay("no such user")
    with pytest.raises(JobError, match="no such user"):
        handle.wait(timeout=30)
    (send,) = (span_record(span) for span in client_spans.get_finished_spans())
    run = _wait_spans(stack, send["trace_id"], {"run default"})["run default"]
    assert run["parent_id"] == send["span_id"]
    assert run["status"] == "ERROR"
    assert run["description"] == "ValueError: no such user"
    assert run["events"] == ["exception"]
    assert run["attributes"]["messaging.message.id"] == str(handle)
