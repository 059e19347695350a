"""OpenTelemetry spans of a job's path, optional (the ``tracing`` extra).

Four spans per job, one trace: the client's ``send`` (kind PRODUCER, a child
of whatever span is current, e.g. the Django request's), the router's
``accept`` and ``hand-out``, and the worker's ``run`` (kind CONSUMER). They
are linked by the W3C trace context the client puts in the job's headers,
our extension headers ``traceparent:<value>`` and one ``tracestate:<member>``
per list member (the header field is comma separated, a tracestate is too); a
reference eventmq peer keeps them as unknown headers.

Tracing is on in a process once ``opentelemetry`` is importable and a real
tracer provider is set (the SDK's, globally or with :func:`set_tracer_provider`);
otherwise every function here does nearly nothing: the API without an SDK
would make no-op spans anyway, and we skip even that. The OpenTelemetry
packages are imported lazily, so the package imports and type-checks
without them.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Iterable
from types import ModuleType, TracebackType
from typing import Any

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol.frame_fields import stored_request

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
#: What the router searches a raw header frame for (only a traced job has it).
TRACEPARENT_B = b"traceparent:"
_TRACESTATE_B = b"tracestate:"
SYSTEM = "eventmq"
#: Seconds between two looks for a tracer provider while none is set.
RECHECK = 1.0

#: True once a real tracer provider was found in this process: the router's
#: hand-out path tests it before looking at a job's headers.
ON = False

_trace: ModuleType | None = None  # opentelemetry.trace once imported
_propagator: Any = None
_missing = False  # opentelemetry is not installed
_provider: Any = None  # set by set_tracer_provider (None: the global one)
_tracer: Any = None
_next_check = 0.0
#: The span of the job this worker child runs now (one at a time).
_run_span: Any = None


def _api() -> ModuleType | None:
    global _trace, _propagator, _missing
    if _trace is None and not _missing:
        try:
            _trace = importlib.import_module("opentelemetry.trace")
            tracecontext = importlib.import_module("opentelemetry.trace.propagation.tracecontext")
        except ImportError:
            _missing = True
            return None
        _propagator = tracecontext.TraceContextTextMapPropagator()
    return _trace


def tracer() -> Any:
    """This process's tracer, or None while tracing is off.

    Off costs a dictionary lookup while nothing imported OpenTelemetry, and an
    attribute read while no global provider is set (a provider set later is
    picked up at once); a provider that is not a real one (the API's no-op) is
    looked at again every :data:`RECHECK` seconds.
    """
    global _tracer, _next_check, ON
    if _tracer is not None:
        return _tracer
    api = _trace
    if api is None:
        if "opentelemetry.trace" not in sys.modules:
            return None  # nothing loaded OpenTelemetry: no provider can be set
        api = _api()  # loaded already: no import cost
        if api is None:
            return None
    if _provider is None and getattr(api, "_TRACER_PROVIDER", 0) is None:
        return None  # no global provider set (yet)
    now = time.monotonic()
    if now < _next_check:
        return None
    _next_check = now + RECHECK
    provider = _provider if _provider is not None else api.get_tracer_provider()
    if isinstance(provider, api.ProxyTracerProvider | api.NoOpTracerProvider):
        return None
    _tracer = provider.get_tracer("django_eventmq")
    ON = True
    return _tracer


def set_tracer_provider(provider: object | None) -> None:
    """Use ``provider`` for django-eventmq's spans in this process instead of the
    global one (None: back to the global one); looks again at once."""
    global _provider, _tracer, _next_check, ON
    _provider, _tracer, _next_check, ON = provider, None, 0.0, False
    tracer()


# -- the trace context in the headers ---------------------------------------------
def header_items(carrier: dict[str, str]) -> list[str]:
    """Header items for a W3C carrier: ``traceparent:...`` and ``tracestate:<member>``s."""
    items = [f"{TRACEPARENT}:{carrier[TRACEPARENT]}"] if TRACEPARENT in carrier else []
    state = carrier.get(TRACESTATE, "")
    items.extend(f"{TRACESTATE}:{m.strip()}" for m in state.split(",") if m.strip())
    return items


def carrier_of(items: Iterable[str]) -> dict[str, str]:
    """The W3C carrier in header items (``Headers.extra``); empty without a traceparent."""
    carrier: dict[str, str] = {}
    states: list[str] = []
    for item in items:
        name, _, value = item.partition(":")
        if name == TRACEPARENT:
            carrier[TRACEPARENT] = value
        elif name == TRACESTATE:
            states.append(value)
    if TRACEPARENT not in carrier:
        return {}
    if states:
        carrier[TRACESTATE] = ",".join(states)
    return carrier


def raw_carrier(headers: bytes) -> dict[str, str]:
    """:func:`carrier_of` a raw header frame (empty if it has none or is not text)."""
    if TRACEPARENT_B not in headers:
        return {}
    try:
        return carrier_of(item.strip() for item in headers.decode().split(","))
    except UnicodeDecodeError:
        return {}


def stamped(headers: bytes, stamp: bytes) -> bytes:
    """``headers`` (a raw header frame) with the trace items ``stamp`` in place of
    any it had."""
    if not stamp:
        return headers
    if TRACEPARENT_B in headers or _TRACESTATE_B in headers:
        headers = b",".join(
            item
            for item in headers.split(b",")
            if not item.strip().startswith((TRACEPARENT_B, _TRACESTATE_B))
        )
    return headers + b"," + stamp if headers else stamp


def _context(carrier: dict[str, str]) -> Any:
    return _propagator.extract(carrier) if carrier else None


def _attributes(operation: str, msgid: str, queue: str) -> dict[str, str]:
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.type": operation,
        "messaging.destination.name": queue,
        "messaging.message.id": msgid,
    }


class _Off:
    """The context manager of a span not made (tracing off)."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_OFF = _Off()


class _Current:
    """A span made current for a ``with`` block and ended after it; an exception
    leaving the block is recorded on it (the span's status: error)."""

    __slots__ = ("_scope",)

    def __init__(self, span: Any) -> None:
        assert _trace is not None
        self._scope = _trace.use_span(span, end_on_exit=True)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._leaving()
        self._scope.__exit__(kind, exc, tb)

    def _leaving(self) -> None:
        """What a subclass undoes as the block ends, before the span ends."""


# -- the client: send ------------------------------------------------------------
class SendSpan:
    """A client's ``send`` span; :attr:`stamp` is the header items carrying its
    context (``b"traceparent:..."``). The caller ends it, failed or not."""

    __slots__ = ("_span", "stamp")

    def __init__(self, tracer_: Any, queue: str, msgid: str, job: str) -> None:
        assert _trace is not None
        attributes = _attributes("send", msgid, queue)
        attributes["eventmq.job"] = job
        # A child of the current span (the Django request's, say).
        self._span = tracer_.start_span(
            f"send {queue}", kind=_trace.SpanKind.PRODUCER, attributes=attributes
        )
        carrier: dict[str, str] = {}
        _propagator.inject(carrier, context=_trace.set_span_in_context(self._span))
        self.stamp = ",".join(header_items(carrier)).encode()

    def fail(self, exc: BaseException) -> None:
        _failed(self._span, exc)

    def end(self) -> None:
        self._span.end()


def send_span(queue: str, msgid: str, job: str) -> SendSpan | None:
    """The ``send`` span of a job the client sends now (None: tracing off)."""
    tracer_ = _tracer
    if tracer_ is None:
        # tracer()'s first checks, inline: this runs on every .delay().
        if _trace is None and "opentelemetry.trace" not in sys.modules:
            return None
        if (
            _trace is not None
            and _provider is None
            and getattr(_trace, "_TRACER_PROVIDER", 0) is None
        ):
            return None
        tracer_ = tracer()
        if tracer_ is None:
            return None
    return SendSpan(tracer_, queue, msgid, job)


def _failed(span: Any, exc: BaseException) -> None:
    assert _trace is not None
    span.record_exception(exc)
    span.set_status(_trace.Status(_trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))


# -- the router: accept and hand-out ----------------------------------------------
def start_accept(headers: bytes, msgid: str, queue: str) -> Any:
    """The router's ``accept`` span of a job with ``headers`` (None: tracing off or
    no trace context); :func:`end` ends it."""
    carrier = raw_carrier(headers)
    tracer_ = tracer() if carrier else None
    if tracer_ is None:
        return None
    assert _trace is not None
    return tracer_.start_span(
        f"accept {queue}",
        context=_context(carrier),
        kind=_trace.SpanKind.CONSUMER,
        attributes=_attributes("receive", msgid, queue),
    )


def end(span: Any, error: str | None = None) -> None:
    """End ``span`` (None: nothing), as failed with ``error`` if given."""
    if span is None:
        return
    if error is not None:
        assert _trace is not None
        span.set_status(_trace.Status(_trace.StatusCode.ERROR, error))
    span.end()


def handed_out(frames: list[bytes], msgid: str, queue: str, jobmanager: str) -> None:
    """The router's ``hand-out`` span of a job just sent to ``jobmanager`` (a
    traced job only; call it when :data:`ON`)."""
    try:
        carrier = raw_carrier(stored_request(frames).headers)
    except ProtocolError:
        return
    tracer_ = tracer()
    if not carrier or tracer_ is None:
        return
    assert _trace is not None
    attributes = _attributes("send", msgid, queue)
    attributes["eventmq.jobmanager"] = jobmanager
    tracer_.start_span(
        f"hand-out {queue}",
        context=_context(carrier),
        kind=_trace.SpanKind.PRODUCER,
        attributes=attributes,
    ).end()


# -- the job manager and its worker child: run -----------------------------------
def run_carrier(msgid: str, queue: str, extra: tuple[str, ...]) -> bytes:
    """What the job manager passes its child with a traced job (``b""``: untraced):
    ``msgid<TAB>queue<TAB>traceparent<TAB>tracestate``."""
    carrier = carrier_of(extra) if extra else {}
    if not carrier:
        return b""
    text = "\t".join((msgid, queue, carrier[TRACEPARENT], carrier.get(TRACESTATE, "")))
    # A tab or line break of a field's own would break the frame: run it untraced.
    return b"" if text.count("\t") != 3 or "\n" in text else text.encode()


class _Running(_Current):
    """The worker's ``run`` span, current while the job runs (so the job's own
    spans are its children)."""

    __slots__ = ()

    def __init__(self, tracer_: Any, carrier: bytes) -> None:
        assert _trace is not None
        msgid, queue, parent, state = carrier.decode().split("\t", 3)
        w3c = {TRACEPARENT: parent, TRACESTATE: state} if state else {TRACEPARENT: parent}
        super().__init__(
            tracer_.start_span(
                f"run {queue}",
                context=_context(w3c),
                kind=_trace.SpanKind.CONSUMER,
                attributes=_attributes("process", msgid, queue),
            )
        )

    def __enter__(self) -> None:
        global _run_span
        _run_span = self._scope.__enter__()

    def _leaving(self) -> None:
        global _run_span
        _run_span = None


def running(carrier: bytes) -> _Off | _Running:
    """Wrap a job's run in a worker child (``carrier``: :func:`run_carrier`'s)."""
    if not carrier:
        return _OFF
    tracer_ = tracer()
    if tracer_ is None:
        return _OFF
    try:
        return _Running(tracer_, carrier)
    except ValueError:  # a malformed carrier: run the job untraced
        return _OFF


def job_named(name: str) -> None:
    """Name the running job on its ``run`` span (once its body is read)."""
    if _run_span is not None:
        _run_span.set_attribute("eventmq.job", name)


def job_failed(exc: BaseException) -> None:
    """Mark the running job's ``run`` span failed with ``exc``."""
    if _run_span is not None:
        _failed(_run_span, exc)


if "opentelemetry.trace" in sys.modules:
    tracer()  # a provider set up before this import turns tracing on now (ON)
    _next_check = 0.0  # none yet: the first use looks again
