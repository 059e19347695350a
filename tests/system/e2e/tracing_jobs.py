"""Jobs of the tracing end-to-end test (imported by the job manager with --job-module)."""

from __future__ import annotations

from opentelemetry import trace

from django_eventmq.client.jobs import job


@job(reply_requested=True)
def traced_add(a: int, b: int) -> int:
    """Adds, inside a span of its own (a child of the worker's run span)."""
    with trace.get_tracer("tests.tracing_jobs").start_as_current_span("inside the job"):
        return a + b


@job(reply_requested=True)
def traced_fail(message: str) -> None:
    raise ValueError(message)
