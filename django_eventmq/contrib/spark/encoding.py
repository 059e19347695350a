"""Turn Arrow record batches into REQUEST fields: msgids, queue names and job bodies.

Work is done a column at a time (Arrow casts integers to JSON text in C;
strings go through the C JSON string encoder), then each row's body is one
``%`` format of a template that holds everything constant: the job's path
and callable, the kwarg names, constant kwargs. The body is the same
``["run", {...}]`` JSON that ``@job(...).delay()`` sends.

msgids are ``<run_id>:<key>``: the key columns' JSON values joined by commas
(``digest-2024-05-01:42,"2024-05-01"``), or, without key columns, a hash of
the row's kwargs. The same export therefore gives the same msgids on every
attempt, whatever Spark's partitioning, and the router runs each msgid once.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import json.encoder
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped,unused-ignore]

from django_eventmq.errors import InvalidJob, SerializationError
from django_eventmq.protocol import Headers, JobBody


def json_default(value: object) -> object:
    """JSON for the Spark types ``json`` does not know: Decimal, dates, times, intervals."""
    if isinstance(value, Decimal):
        # A string keeps every digit; the job does Decimal(value).
        return str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


encode_value: Callable[[Any], str] = json.JSONEncoder(
    separators=(",", ":"), allow_nan=False, default=json_default
).encode
_encode_str: Callable[[str], str] = json.encoder.encode_basestring_ascii

_BODY_TAIL = '},"class_args":[],"class_kwargs":{}}]'


class JobLike(Protocol):
    """What we read from a ``@job`` function: its module path, name, queue and headers."""

    path: str
    callable_name: str
    queue: str
    headers: Headers


@dataclass(frozen=True, slots=True)
class JobTarget:
    """The job every row becomes: where it lives, its queue and its header field."""

    path: str
    callable: str
    queue: str
    headers: str

    @classmethod
    def parse(
        cls, job: str | JobLike, queue: str | None = None, headers: Headers | None = None
    ) -> JobTarget:
        """From ``"app.jobs.send_digest"`` or a ``@job`` function; ``guarantee`` is always on."""
        if isinstance(job, str):
            path, _, name = job.rpartition(".")
            default_queue, default_headers = "default", Headers()
        else:
            path, name = job.path, job.callable_name
            default_queue, default_headers = job.queue, job.headers
        JobBody(path=path, callable=name)  # InvalidJob when it is not a dotted name
        use = (headers or default_headers).with_(guarantee=True)
        target = cls(path=path, callable=name, queue=queue or default_queue, headers=use.encode())
        if not target.queue:
            raise InvalidJob("queue name is empty")
        return target

    @property
    def name(self) -> str:
        return f"{self.path}.{self.callable}"

    def body_head(self) -> str:
        return (
            f'["run",{{"callable":{_encode_str(self.callable)},'
            f'"path":{_encode_str(self.path)},"args":[],"kwargs":{{'
        )


def json_fragments(column: pa.Array | pa.ChunkedArray, name: str) -> list[str]:
    """Each value of ``column`` as JSON text (``null`` for nulls)."""
    kind = column.type
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        # Arrow writes integers and true/false exactly as JSON does.
        return pc.cast(column, pa.string()).fill_null("null").to_pylist()  # type: ignore[no-any-return]
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        raise SerializationError(
            f"column {name!r} is binary, which JSON cannot carry; cast it to a string first"
        )
    if pa.types.is_decimal(kind) or pa.types.is_date(kind):
        # Arrow's text for these is exact (all digits) and ISO (dates), and
        # never needs escaping; as JSON strings, like json_default makes them.
        texts = pc.cast(column, pa.string()).to_pylist()
        return ["null" if t is None else f'"{t}"' for t in texts]
    values = column.to_pylist()
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return ["null" if v is None else _encode_str(v) for v in values]
    try:
        return [encode_value(v) for v in values]
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"column {name!r} ({kind}): {exc}") from exc


@dataclass(frozen=True, slots=True)
class Encoded:
    """REQUEST fields for the rows of one batch."""

    msgids: list[bytes]
    bodies: list[bytes]
    #: One queue name per row, or None when every row goes to the target's queue.
    queues: list[bytes] | None


@dataclass(frozen=True)
class RowEncoder:
    """Encodes rows as jobs: kwargs from columns, msgid from the run id and key columns.

    Made on the driver, pickled to the executors with the task.
    """

    target: JobTarget
    run_id: str
    #: (kwarg name, column) pairs.
    kwargs: tuple[tuple[str, str], ...]
    #: Columns that identify a row; empty: a hash of the kwargs.
    key: tuple[str, ...] = ()
    #: Column holding each row's queue name; None: the target's queue.
    queue_column: str | None = None
    #: Kwargs with the same value for every job, already JSON (``"a":1,"b":2``).
    extra: str = ""
    #: Kwarg that receives the job's msgid, if any.
    msgid_kwarg: str | None = None

    def __post_init__(self) -> None:
        if not self.run_id:
            raise ValueError("run_id is empty: it is what makes msgids repeatable")
        names = [name for name, _ in self.kwargs]
        if self.msgid_kwarg is not None:
            names.append(self.msgid_kwarg)
        if len(set(names)) != len(names):
            raise ValueError(f"a kwarg name is given twice: {names}")

    @classmethod
    def build(
        cls,
        target: JobTarget,
        run_id: str,
        columns: Sequence[str],
        *,
        kwargs: Mapping[str, str] | Sequence[str] | None = None,
        key: str | Sequence[str] | None = None,
        queue_column: str | None = None,
        extra: Mapping[str, Any] | None = None,
        msgid_kwarg: str | None = None,
    ) -> RowEncoder:
        """Check the names against the DataFrame's ``columns`` and build the encoder."""
        if kwargs is None:
            pairs = tuple((c, c) for c in columns if c != queue_column)
        elif isinstance(kwargs, Mapping):
            pairs = tuple(kwargs.items())
        else:
            pairs = tuple((c, c) for c in kwargs)
        keys = (key,) if isinstance(key, str) else tuple(key or ())
        wanted = [c for _, c in pairs] + list(keys) + ([queue_column] if queue_column else [])
        missing = sorted({c for c in wanted if c not in columns})
        if missing:
            raise ValueError(f"no column(s) {missing} in the DataFrame; it has {list(columns)}")
        extra_text = ""
        if extra:
            clash = sorted(set(extra) & ({n for n, _ in pairs} | {msgid_kwarg}))
            if clash:
                raise ValueError(f"kwarg(s) {clash} come both from columns and from extra")
            try:
                extra_text = ",".join(
                    f"{_encode_str(k)}:{encode_value(v)}" for k, v in extra.items()
                )
            except (TypeError, ValueError) as exc:
                raise SerializationError(f"extra kwargs: {exc}") from exc
        return cls(
            target=target,
            run_id=run_id,
            kwargs=pairs,
            key=keys,
            queue_column=queue_column,
            extra=extra_text,
            msgid_kwarg=msgid_kwarg,
        )

    def encode(self, batch: pa.RecordBatch) -> Encoded:
        """msgids, bodies (and queue names) for every row of ``batch``."""
        rows = batch.num_rows
        cache: dict[str, list[str]] = {}

        def fragments(column: str) -> list[str]:
            if column not in cache:
                cache[column] = json_fragments(batch.column(column), column)
            return cache[column]

        kw_columns = [fragments(column) for _, column in self.kwargs]
        kw_template = ",".join(f"{_escape(_encode_str(name))}:%s" for name, _ in self.kwargs)
        kw_texts = [kw_template % values for values in zip(*kw_columns, strict=True)]
        if not self.kwargs:
            kw_texts = [""] * rows
        msgids = self._msgids(rows, [fragments(c) for c in self.key], kw_texts)
        head = self.target.body_head()
        more = ""
        if self.extra:
            more = "," + self.extra if self.kwargs else self.extra
        if self.msgid_kwarg is None:
            bodies = [f"{head}{kw}{more}{_BODY_TAIL}".encode() for kw in kw_texts]
        else:
            sep = "," if (self.kwargs or self.extra) else ""
            name = _encode_str(self.msgid_kwarg)
            bodies = [
                f"{head}{kw}{more}{sep}{name}:{_encode_str(m)}{_BODY_TAIL}".encode()
                for kw, m in zip(kw_texts, msgids, strict=True)
            ]
        return Encoded(
            msgids=[m.encode() for m in msgids],
            bodies=bodies,
            queues=self._queues(batch) if self.queue_column else None,
        )

    def _msgids(self, rows: int, key_columns: list[list[str]], kw_texts: list[str]) -> list[str]:
        prefix = f"{self.run_id}:"
        for column, values in zip(self.key, key_columns, strict=True):
            if "null" in values:
                # A missing key would make every such row the same msgid: all
                # but one would be dropped as duplicates.
                raise InvalidJob(f"key column {column!r} is null in a row; keys must be set")
        if len(key_columns) == 1:
            return [prefix + value for value in key_columns[0]]
        if key_columns:
            return [prefix + ",".join(values) for values in zip(*key_columns, strict=True)]
        return [
            prefix + hashlib.blake2b(kw.encode(), digest_size=16).hexdigest() for kw in kw_texts
        ]

    def _queues(self, batch: pa.RecordBatch) -> list[bytes]:
        assert self.queue_column is not None
        names = batch.column(self.queue_column).to_pylist()
        if not all(isinstance(n, str) and n for n in names):
            raise InvalidJob(f"queue column {self.queue_column!r} has an empty or null value")
        return [n.encode() for n in names]


def _escape(text: str) -> str:
    """``text`` as a literal inside a %-format template."""
    return text.replace("%", "%%")
