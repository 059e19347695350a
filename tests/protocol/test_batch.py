"""BATCH (our extension): many REQUESTs in one message, packed in one JOBS frame."""

from __future__ import annotations

import pytest

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import decode, encode
from django_eventmq.protocol.batch import (
    MAX_BATCH_JOBS,
    Batch,
    BatchJob,
    body_sizes,
    job_bounds,
    jobs_at,
    pack_jobs,
    packed_size,
    shared_route,
    unpack_jobs,
)

BODY = '["run",{"callable":"f","path":"m","args":["é \\" ,\\n"],"kwargs":{}}]'.encode()
JOBS: list[BatchJob] = [
    (b"m1", b"email", b"guarantee", BODY),
    ("ü-2".encode(), b"default", b"", b'["run",{}]'),
    (b"m3", b"q", b"retry-count:3,guarantee", '[\n  "\u2603"\n]'.encode()),
]


def test_jobs_frame_is_the_lengths_then_the_fields_as_requests_carry_them() -> None:
    frame = pack_jobs(JOBS[:2])
    head, _, data = frame.partition(b"\n")
    assert head == b"2,5,9,%d,4,7,0,10" % len(BODY)
    assert data == b"m1emailguarantee" + BODY + "ü-2".encode() + b"default" + b'["run",{}]'
    assert frame.decode()  # UTF-8 text like every eMQP frame


def test_round_trip_keeps_every_field_byte_for_byte() -> None:
    assert unpack_jobs(pack_jobs(JOBS)) == JOBS
    message = Batch(msgid="b1", jobs=tuple(JOBS))
    frames = encode(message)
    assert frames[:4] == [b"", b"eMQP/1.0", b"BATCH", b"b1"]
    assert frames[4] == pack_jobs(JOBS)
    assert decode(frames) == message


def test_empty_fields_other_than_the_msgid_survive_the_round_trip() -> None:
    jobs: list[BatchJob] = [(b"a", b"", b"", b""), (b"b", b"q", b"", b"")]
    assert unpack_jobs(pack_jobs(jobs)) == jobs


def test_packed_size_is_an_upper_bound() -> None:
    for count in (1, 7, 100):
        jobs = [(b"id-%d" % i, b"email", b"guarantee", BODY * (i % 3)) for i in range(count)]
        assert len(pack_jobs(jobs)) <= sum(packed_size(*job) for job in jobs) + 1


def test_the_most_jobs_are_taken_and_one_more_is_refused() -> None:
    jobs = [(b"%d" % i, b"q", b"", b"[]") for i in range(MAX_BATCH_JOBS + 1)]
    assert len(unpack_jobs(pack_jobs(jobs[:-1]))) == MAX_BATCH_JOBS
    with pytest.raises(ProtocolError, match=f"more than {MAX_BATCH_JOBS}"):
        unpack_jobs(pack_jobs(jobs))
    with pytest.raises(ProtocolError, match="more than 2"):
        unpack_jobs(pack_jobs(jobs[:3]), max_jobs=2)


GOOD = pack_jobs(JOBS[:1])
SPLIT = "é".encode()  # two bytes: a length of 1 cuts it in half


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (b"", "no head"),
        (b"2,5,9,3", "no head"),
        (b"\n", "comma-separated decimal lengths"),
        (b"2,5,9,+3\nm1emailguaranteeabc", "comma-separated decimal lengths"),
        (b"2,5,9, 3\nm1emailguaranteeabc", "comma-separated decimal lengths"),
        (b"2,5,9,-3\nm1emailguaranteeabc", "comma-separated decimal lengths"),
        (b"2,5,9,,3\nm1emailguaranteeabc", "comma-separated decimal lengths"),
        (b"2,5,9,03\nm1emailguaranteeabc", "comma-separated decimal lengths"),
        (b"2,5,9,1_0\nm1emailguaranteeabc", "comma-separated decimal lengths"),
        ("2,5,9,\uff13\nm1emailguaranteeabc".encode(), "comma-separated decimal lengths"),
        (b"2,5,9\nm1emailguarantee", "3 lengths in the head, not 4 per job"),
        (b"2,5,9,4\nm1emailguaranteeabc", "add up to 20 bytes, the fields take 19"),
        (b"2,5,9,2\nm1emailguaranteeabc", "add up to 18 bytes, the fields take 19"),
        (b"2,5,9,99999999999999999999\nm1emailguaranteeabc", "add up to"),
        (b"0,5,9,3\nemailguaranteeabc", "job 0 has an empty msgid"),
        (GOOD + b"\xff", "add up to"),
        (b"2,1,0,1\nm1\xff[", "not UTF-8 text"),
        (b"3,0,0,1\nm1" + SPLIT, "splits a UTF-8 character"),
        (b"2,1,1,0\nm1" + SPLIT, "splits a UTF-8 character"),
    ],
)  # fmt: skip
def test_malformed_jobs_frames_are_refused_saying_why(frame: bytes, reason: str) -> None:
    with pytest.raises(ProtocolError, match=reason):
        unpack_jobs(frame)
    with pytest.raises(ProtocolError):  # the codec may refuse a frame that is not text first
        decode([b"", b"eMQP/1.0", b"BATCH", b"b1", frame])


def test_a_frame_over_the_byte_bound_is_refused() -> None:
    with pytest.raises(ProtocolError, match="larger than 10 bytes"):
        unpack_jobs(GOOD, max_bytes=10)


def test_wrong_frame_count_is_refused() -> None:
    with pytest.raises(ProtocolError, match="expected 1 frame"):
        decode([b"", b"eMQP/1.0", b"BATCH", b"b1"])
    with pytest.raises(ProtocolError, match="expected 1 frame"):
        decode([b"", b"eMQP/1.0", b"BATCH", b"b1", GOOD, GOOD])


@pytest.mark.parametrize(
    ("jobs", "reason"),
    [
        ((), "1 to 1000 jobs, got 0"),
        (((b"a", b"q", b"", b"[]"),) * (MAX_BATCH_JOBS + 1), "got 1001"),
        (((b"", b"q", b"", b"[]"),), "job 0 has an empty msgid"),
        (((b"a", b"q", b""),), "job 0 is not"),
        ([(b"a", b"q", b"", b"[]")], "jobs must be a tuple"),
        (((b"a", "q", b"", b"[]"),), "job 0 queue is not bytes"),
        (((b"a", b"q", b"", b"[]"), (b"b", b"q", b"\xff", b"[]")), "job 1 headers is not UTF-8"),
    ],
)  # fmt: skip
def test_bad_jobs_fail_at_construction(jobs: object, reason: str) -> None:
    with pytest.raises(ProtocolError, match=reason):
        Batch(msgid="b1", jobs=jobs)  # type: ignore[arg-type]


def test_an_empty_batch_msgid_is_refused() -> None:
    with pytest.raises(ProtocolError, match="msgid must be a non-empty string"):
        Batch(msgid="", jobs=tuple(JOBS))


def test_shared_route_and_body_sizes_read_the_offsets_without_cutting_jobs() -> None:
    same = [(b"m%d" % i, b"email", b"guarantee", b"[%d]" % i * i) for i in range(1, 4)]
    frame = pack_jobs(same)
    ends = job_bounds(frame)
    assert jobs_at(frame, ends) == same
    assert shared_route(frame, ends) == (b"email", b"guarantee")
    assert body_sizes(ends) == [3, 6, 9]
    for changed in [
        (b"m9", b"emails", b"guarantee", b"[]"),  # a longer queue
        (b"m9", b"other", b"guarantee", b"[]"),  # same length, other bytes
        (b"m9", b"email", b"guaranteE", b"[]"),
        (b"m9", b"emailg", b"uarantee", b"[]"),  # same bytes, cut elsewhere
    ]:
        mixed = pack_jobs([*same, changed])
        assert shared_route(mixed, job_bounds(mixed)) is None, changed
