"""A span exporter that writes JSON lines to a file, and reading them back."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """The parts of a finished span the tests check, as plain JSON values."""
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "kind": span.kind.name,
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "description": span.status.description,
        "events": [event.name for event in span.events],
        "pid": os.getpid(),
    }


class JsonLinesExporter(SpanExporter):
    def __init__(self, path: Path) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self.path.open("a") as out:
            for span in spans:
                out.write(json.dumps(span_record(span)) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def install(directory: str) -> None:
    """Set this process's global tracer provider to one exporting into ``directory``."""
    provider = TracerProvider()
    path = Path(directory) / f"spans-{os.getpid()}.jsonl"
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(path)))
    trace.set_tracer_provider(provider)


def read_spans(directory: Path) -> list[dict[str, Any]]:
    """Every span the processes exporting into ``directory`` wrote so far."""
    spans: list[dict[str, Any]] = []
    for path in sorted(directory.glob("spans-*.jsonl")):
        spans.extend(json.loads(line) for line in path.read_text().splitlines() if line)
    return spans


@contextmanager
def in_memory_spans() -> Iterator[InMemorySpanExporter]:
    """django-eventmq's spans of this process, in memory, for a ``with`` block
    (through ``tracing.set_tracer_provider``: the global provider is left alone)."""
    from django_eventmq.runtime import tracing  # not before install() ran in a process

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        tracing.set_tracer_provider(None)
        provider.shutdown()
