"""Traced jobs and reference eventmq 0.3.13 peers: the trace headers do no harm.

OUR client with tracing on puts ``traceparent:...`` in the job's headers. A
reference router forwards it to our job manager, whose worker still makes the
``run`` span under the client's ``send``; a reference job manager behind our
router runs the job as any other (it ignores headers it does not know).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support import ROOT, wait_for
from tests.tracing_probe.export import in_memory_spans, read_spans, span_record

from .conftest import (
    INTEROP,
    REFERENCE_DEADLINE,
    our_router_with_reference_jobmanager,
    router_with_jobmanager,
    start_our_jobmanager,
    start_reference_router,
    wait_records,
    without_pid,
)
from .refjobs.record import record

pytestmark = INTEROP


@pytest.fixture
def client_spans() -> Iterator[InMemorySpanExporter]:
    with in_memory_spans() as exporter:
        yield exporter


@pytest.fixture
def spans(tmp_path: Path) -> Path:
    """The directory the tracing probe of our processes writes their spans to."""
    made = tmp_path / "spans"
    made.mkdir()
    return made


def _probe_env(spans: Path) -> dict[str, str]:
    probe = ROOT / "tests" / "tracing_probe"
    return {"TRACE_PROBE_DIR": str(spans), "PYTHONPATH": os.pathsep.join((str(probe), str(ROOT)))}


TracedRun = Callable[[Any], AbstractContextManager[tuple[str, dict[str, Any]]]]


@pytest.fixture
def traced_run(
    client_spans: InMemorySpanExporter, records_file: Path, use_broker: Callable[[str], None]
) -> TracedRun:
    """``traced_run(stack)``: inside ``stack`` (router, job manager) send ``record``
    traced, see it run, and give its msgid and the client's send span (the processes
    still run meanwhile)."""

    @contextmanager
    def run(stack: Any) -> Iterator[tuple[str, dict[str, Any]]]:
        with stack as (router, _jobmanager):
            use_broker(router.frontend)
            msgid = record.delay("traced", out=str(records_file))
            records = wait_records(records_file, timeout=REFERENCE_DEADLINE)
            assert without_pid(records) == [{"args": ["traced"], "kwargs": {}}]
            (send,) = (span_record(span) for span in client_spans.get_finished_spans())
            yield str(msgid), send

    return run


def test_a_reference_router_carries_the_trace_to_our_worker(
    tmp_path: Path, spans: Path, traced_run: TracedRun
) -> None:
    stack = router_with_jobmanager(
        start_reference_router(tmp_path),
        lambda backend: start_our_jobmanager(backend, _probe_env(spans)),
    )
    with traced_run(stack) as (msgid, send):
        run = wait_for(
            lambda: [s for s in read_spans(spans) if s["name"] == "run default"],
            10,
            what="our worker's run span",
        )
        assert [(s["trace_id"], s["parent_id"]) for s in run] == [
            (send["trace_id"], send["span_id"])
        ]
        assert run[0]["attributes"]["messaging.message.id"] == msgid


def test_a_reference_jobmanager_runs_a_traced_job_from_our_router(
    tmp_path: Path, spans: Path, traced_run: TracedRun
) -> None:
    stack = our_router_with_reference_jobmanager(tmp_path, _probe_env(spans))
    with traced_run(stack) as (_msgid, send):
        wait_for(
            lambda: (
                {s["name"] for s in read_spans(spans) if s["parent_id"] == send["span_id"]}
                >= {"accept default", "hand-out default"}
            ),
            10,
            what="our router's accept and hand-out spans, children of the client's send",
        )
