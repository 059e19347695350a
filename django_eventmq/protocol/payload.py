"""The job body: ``["run", {"callable": ..., "path": ..., "args": ...}]`` as JSON.

``path`` is a module path, or ``"module:ClassName"`` for a method: the class
is built with ``class_args``/``class_kwargs`` and the method named by
``callable`` is called with ``args``/``kwargs``. Bodies are JSON only:
nothing from the wire is ever unpickled or evaluated.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django_eventmq.errors import InvalidJob, SerializationError
from django_eventmq.protocol.constants import JOB_VERB_RUN

#: Bodies nested deeper than this are refused (a cheap guard against
#: pathological JSON; the decoder itself recurses per level).
MAX_JSON_DEPTH = 64
#: Bodies larger than this (bytes, or characters for text) are refused before parsing.
MAX_JSON_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class JobBody:
    """What to run: a callable in a module (or a method of a class) and its arguments."""

    path: str
    callable: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    class_args: tuple[Any, ...] = ()
    class_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Runs for every job a worker parses: no generator, no getattr by name.
        path = self.path
        if not isinstance(path, str):
            raise InvalidJob(f"job path must be a dotted module path, got {path!r}")
        module, sep, class_part = path.partition(":")
        if not _is_dotted(module):
            raise InvalidJob(f"job path must be a dotted module path, got {path!r}")
        if sep and not class_part.isidentifier():
            raise InvalidJob(f"job path class part must be an identifier, got {class_part!r}")
        if not isinstance(self.callable, str) or not self.callable.isidentifier():
            raise InvalidJob(f"job callable must be an identifier, got {self.callable!r}")
        _check_keys("kwargs", self.kwargs)
        _check_keys("class_kwargs", self.class_kwargs)

    @property
    def name(self) -> str:
        """Dotted name of the job, as ``@job`` registers it: ``module.func`` or
        ``module:Class.method``."""
        return f"{self.path}.{self.callable}"

    @property
    def module(self) -> str:
        return self.path.partition(":")[0]

    @property
    def class_name(self) -> str | None:
        return self.path.partition(":")[2] or None

    def encode(self) -> str:
        """The JSON text sent in the message frame."""
        return encode_json(
            [
                JOB_VERB_RUN,
                {
                    "callable": self.callable,
                    "path": self.path,
                    "args": list(self.args),
                    "kwargs": self.kwargs,
                    "class_args": list(self.class_args),
                    "class_kwargs": self.class_kwargs,
                },
            ]
        )


def _is_dotted(path: str) -> bool:
    return bool(path) and all(map(str.isidentifier, path.split(".")))


def _check_keys(name: str, value: object) -> None:
    """:class:`InvalidJob` unless ``value`` is a dict with only ``str`` keys."""
    if not isinstance(value, dict) or (value and not all(map(isinstance, value, _STR))):
        raise InvalidJob(f"job {name} must be an object with string keys")


_STR = itertools.repeat(str)


def encode_json(value: Any) -> str:
    """Compact JSON, or :class:`SerializationError` (a ``TypeError``) naming what failed."""
    try:
        return compact_json(value)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"not JSON-serialisable: {exc}") from exc


def _not_json(value: object) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _compact_json_function() -> Callable[[Any], str]:
    """``JSONEncoder(separators=(",", ":"), allow_nan=False).encode``, faster.

    ``JSONEncoder.encode`` builds CPython's C encoder anew on every call: for
    a job's small ``{"args": [...], "kwargs": {...}}`` that is two thirds of
    the cost (2.8 us against 1.0 us reusing one). The C encoder kept here is
    made without the circular-reference table (it cannot be shared across
    calls), so a circular value ends in ``RecursionError``, turned into the
    ``ValueError`` the slow path raises. Without the C encoder (not
    CPython), the slow path.
    """
    slow = _encoder().encode
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return slow
    try:
        fast = make(
            None,
            _not_json,
            json.encoder.encode_basestring_ascii,
            None,
            ":",
            ",",
            False,
            False,
            False,
        )
    except TypeError:  # another signature: keep to the documented API
        return slow

    def compact(value: Any) -> str:
        try:
            return "".join(fast(value, 0))
        except RecursionError:
            raise ValueError("Circular reference detected (or nesting too deep)") from None

    return compact


@functools.cache
def _encoder() -> json.JSONEncoder:
    """One compact encoder for every call (``json.dumps`` with options builds one each time)."""
    return json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


#: One decoder for every call (``json.loads`` with an argument builds a new one each
#: time), and its scanner: one value from an index (C in CPython).
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_scan: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]


def decode_json(
    text: str | bytes,
    what: str = "message",
    *,
    max_depth: int = MAX_JSON_DEPTH,
    max_bytes: int = MAX_JSON_BYTES,
) -> Any:
    """Parse JSON from the wire, refusing NaN/Infinity, excessive size and nesting."""
    if len(text) > max_bytes:
        raise InvalidJob(f"{what} is larger than {max_bytes} bytes")
    try:
        # The wire is UTF-8 (eMQP); UnicodeDecodeError is a ValueError.
        if isinstance(text, bytes):
            text = text.decode()
        try:
            # JSONDecoder.decode, less its two whitespace matches: text without
            # whitespace around the value (every peer of ours sends that) is
            # scanned once; anything else (or an error) goes the decoder's way,
            # which gives the same value, or raises its own error.
            value, end = _scan(text, 0)
        except StopIteration:
            value = _DECODER.decode(text)
        else:
            if end != len(text):
                value = _DECODER.decode(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidJob(f"{what} is not valid JSON: {exc}") from exc
    # A cheap bound first: n opening brackets nest values at most n + 1 deep, so
    # most bodies need no walk over the parsed value.
    if text.count("[") + text.count("{") >= max_depth and _depth_exceeds(value, max_depth):
        raise InvalidJob(f"{what} is nested deeper than {max_depth} levels")
    return value


def _depth_exceeds(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return False


def parse_job(
    text: str | bytes, *, max_depth: int = MAX_JSON_DEPTH, max_bytes: int = MAX_JSON_BYTES
) -> JobBody:
    """Parse a REQUEST's message frame into a :class:`JobBody`."""
    value = decode_json(text, "job body", max_depth=max_depth, max_bytes=max_bytes)
    if not isinstance(value, list) or len(value) != 2:
        raise InvalidJob('job body must be a JSON array ["run", {...}]')
    verb, spec = value
    if verb != JOB_VERB_RUN:
        raise InvalidJob(f"job body verb must be {JOB_VERB_RUN!r}, got {verb!r}")
    if not isinstance(spec, dict):
        raise InvalidJob("job body's second element must be an object")
    for name in ("args", "class_args"):
        if not isinstance(spec.get(name, []), list):
            raise InvalidJob(f"job {name} must be an array")
    if "path" not in spec or "callable" not in spec:
        raise InvalidJob("job body needs both 'path' and 'callable'")
    return JobBody(
        path=spec["path"],
        callable=spec["callable"],
        args=tuple(spec.get("args", ())),
        kwargs=spec.get("kwargs", {}),
        class_args=tuple(spec.get("class_args", ())),
        class_kwargs=spec.get("class_kwargs", {}),
    )


#: Compact JSON (no spaces, ASCII, NaN refused); ``TypeError``/``ValueError`` if not JSON.
compact_json: Callable[[Any], str] = _compact_json_function()
