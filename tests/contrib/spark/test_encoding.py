"""Rows to REQUEST fields (pyarrow only, no Spark): bodies, msgids, errors."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from decimal import Decimal

import pytest

from django_eventmq.client.jobs import job
from django_eventmq.errors import InvalidJob, SerializationError
from django_eventmq.protocol import Headers, parse_headers, parse_job
from tests.support import ROOT

pytestmark = pytest.mark.spark
pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install pyarrow)")

from django_eventmq.contrib.spark.encoding import JobTarget, RowEncoder  # noqa: E402

TARGET = JobTarget.parse("app.jobs.send_digest", "email")


def encoder(batch, **options) -> RowEncoder:
    options.setdefault("key", "id")
    return RowEncoder.build(TARGET, "run-1", batch.schema.names, **options)


def kwargs_of(body: bytes) -> dict:
    parsed = parse_job(body)
    assert (parsed.path, parsed.callable, parsed.args) == ("app.jobs", "send_digest", ())
    return parsed.kwargs


def test_columns_become_kwargs_with_spark_types_as_json():
    when = dt.datetime(2024, 5, 1, 12, 30, tzinfo=dt.UTC)
    batch = pa.RecordBatch.from_pydict(
        {
            "id": pa.array([1, 2], pa.int64()),
            "name": ['Ann "A" 100%', "Zoë\n"],
            "ok": [True, None],
            "score": [1.5, None],
            "price": pa.array([Decimal("12.50"), None], pa.decimal128(10, 2)),
            "day": pa.array([dt.date(2024, 5, 1), None], pa.date32()),
            "at": pa.array([when, None], pa.timestamp("us", tz="UTC")),
            "tags": [["a", "b"], []],
            "point": [{"x": 1, "y": Decimal("0.5")}, None],
        }
    )
    encoded = encoder(batch).encode(batch)

    assert kwargs_of(encoded.bodies[0]) == {
        "id": 1,
        "name": 'Ann "A" 100%',
        "ok": True,
        "score": 1.5,
        "price": "12.50",  # a string keeps every digit
        "day": "2024-05-01",
        "at": "2024-05-01T12:30:00+00:00",
        "tags": ["a", "b"],
        "point": {"x": 1, "y": "0.5"},
    }
    assert kwargs_of(encoded.bodies[1]) == {
        "id": 2,
        "name": "Zoë\n",
        "ok": None,
        "score": None,
        "price": None,
        "day": None,
        "at": None,
        "tags": [],
        "point": None,
    }
    assert encoded.queues is None  # every row goes to the target's queue


def test_msgids_are_the_run_id_and_the_key_columns_json():
    batch = pa.RecordBatch.from_pydict({"id": [7, 8], "day": ["2024-05-01", "2024-05-02"]})
    assert encoder(batch).encode(batch).msgids == [b"run-1:7", b"run-1:8"]
    both = encoder(batch, key=["id", "day"]).encode(batch)
    assert both.msgids == [b'run-1:7,"2024-05-01"', b'run-1:8,"2024-05-02"']


def test_composite_keys_never_collide_on_the_separator():
    batch = pa.RecordBatch.from_pydict({"a": ["x,y", "x"], "b": ["z", "y,z"]})
    msgids = encoder(batch, key=["a", "b"]).encode(batch).msgids
    assert len(set(msgids)) == 2


def test_without_a_key_the_msgid_is_a_hash_of_the_kwargs_and_repeatable():
    batch = pa.RecordBatch.from_pydict({"id": [1, 2, 1], "v": ["a", "b", "a"]})
    first = encoder(batch, key=None).encode(batch).msgids
    again = encoder(batch, key=None).encode(batch.slice(1))  # another batching, same rows
    assert first[0] == first[2] != first[1]
    assert again.msgids == first[1:]
    assert first[0].startswith(b"run-1:") and len(first[0]) == len("run-1:") + 32


def test_a_kwargs_mapping_extra_kwargs_and_the_msgid_as_a_kwarg():
    batch = pa.RecordBatch.from_pydict({"id": [5], "mail": ["a@example.com"], "x": [0]})
    enc = encoder(
        batch, kwargs={"email": "mail"}, extra={"run": "r1", "n": 2}, msgid_kwarg="job_id"
    )
    encoded = enc.encode(batch)
    assert kwargs_of(encoded.bodies[0]) == {
        "email": "a@example.com",
        "run": "r1",
        "n": 2,
        "job_id": "run-1:5",
    }


def test_only_the_msgid_kwarg():
    batch = pa.RecordBatch.from_pydict({"id": [5]})
    encoded = encoder(batch, kwargs=[], msgid_kwarg="job_id").encode(batch)
    assert kwargs_of(encoded.bodies[0]) == {"job_id": "run-1:5"}


def test_a_queue_column_routes_each_row():
    batch = pa.RecordBatch.from_pydict({"id": [1, 2], "q": ["email", "reports"]})
    encoded = encoder(batch, queue_column="q").encode(batch)
    assert encoded.queues == [b"email", b"reports"]
    assert "q" not in kwargs_of(encoded.bodies[0])


@pytest.mark.parametrize(
    ("column", "error", "message"),
    [
        (pa.array([1.0, float("nan")]), SerializationError, r"column 'v' \(double\)"),
        (pa.array([b"\x00"], pa.binary()), SerializationError, "column 'v' is binary"),
        (pa.array([dt.time(1, 2), dt.time(3, 4)]).cast(pa.time64("us")), None, None),
    ],
)
def test_values_json_cannot_carry_fail_naming_the_column(column, error, message):
    batch = pa.RecordBatch.from_pydict({"id": list(range(len(column))), "v": column})
    if error is None:
        assert kwargs_of(encoder(batch).encode(batch).bodies[0])["v"] == "01:02:00"
        return
    with pytest.raises(error, match=message):
        encoder(batch).encode(batch)


def test_a_null_key_fails_rather_than_merging_rows():
    batch = pa.RecordBatch.from_pydict({"id": pa.array([1, None], pa.int64())})
    with pytest.raises(InvalidJob, match="key column 'id' is null"):
        encoder(batch).encode(batch)


def test_an_empty_queue_value_fails():
    batch = pa.RecordBatch.from_pydict({"id": [1], "q": [""]})
    with pytest.raises(InvalidJob, match="queue column 'q'"):
        encoder(batch, queue_column="q").encode(batch)


def test_names_are_checked_before_anything_runs():
    names = ["id", "v"]
    with pytest.raises(ValueError, match=r"no column\(s\) \['nope'\]"):
        RowEncoder.build(TARGET, "r", names, key="nope")
    with pytest.raises(ValueError, match=r"kwarg\(s\) \['v'\] come both"):
        RowEncoder.build(TARGET, "r", names, key="id", extra={"v": 1})
    with pytest.raises(SerializationError, match="extra kwargs"):
        RowEncoder.build(TARGET, "r", names, key="id", extra={"x": object()})
    with pytest.raises(ValueError, match="run_id is empty"):
        RowEncoder.build(TARGET, "", names, key="id")


def test_the_target_asks_for_guarantee_and_checks_the_name():
    assert parse_headers(TARGET.headers).guarantee
    assert (TARGET.path, TARGET.callable, TARGET.queue) == ("app.jobs", "send_digest", "email")
    assert JobTarget.parse("app.jobs.f").queue == "default"
    with pytest.raises(InvalidJob):
        JobTarget.parse("not a name")
    with pytest.raises(InvalidJob):
        JobTarget.parse("nodots")


@job(queue="reports", retry_count=2)
def registered(**kwargs: object) -> None:
    """A @job function whose queue and headers a target takes over."""


def test_a_job_function_gives_its_path_queue_and_headers():
    target = JobTarget.parse(registered)
    assert (target.path, target.callable, target.queue) == (
        __name__,
        "registered",
        "reports",
    )
    assert parse_headers(target.headers) == Headers(guarantee=True, retry_count=2)


def test_a_body_is_what_job_delay_would_send():
    batch = pa.RecordBatch.from_pydict({"id": [3], "name": ["x"]})
    target = JobTarget.parse(registered)
    body = RowEncoder.build(target, "r", batch.schema.names, key="id").encode(batch).bodies[0]
    assert json.loads(body) == json.loads(registered.encode_body((), {"id": 3, "name": "x"}))


def test_importing_the_package_loads_neither_django_nor_spark():
    code = (
        "import sys, django_eventmq.contrib.spark, django_eventmq.contrib.spark.sender\n"
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    loaded = set(out.stdout.split())
    assert "zmq" in loaded
    assert not loaded & {"django", "pyspark", "pyarrow"}
