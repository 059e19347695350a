"""Frame views vs indexing by hand: ns per message to classify a received frame
list and read its fields (REQUEST, BATCH, READY, DONE as a ROUTER gets them; ACK as a
DEALER gets it). ``REQUEST*``: every read the frontend's REQUEST path makes
(the decode checks, the limits, the frames kept for the book, the ACK's msgid),
which is what the views must not make slower.

The "by hand" peer is what the router and the pipeline did before
:mod:`django_eventmq.protocol.frame_fields`: a length, delimiter, version and command
check, then ``raw[4]``, ``raw[5]``, ... Both read every field the hot path uses.

    PYTHONPATH=. .venv/bin/python benchmarks/frame_views.py [--number N] [--repeat R] [--rounds K]
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable

from django_eventmq.protocol import constants as C
from django_eventmq.protocol.batch import pack_jobs
from django_eventmq.protocol.frame_fields import (
    AckView,
    BatchView,
    DoneView,
    ReadyView,
    RequestView,
    acked_msgid,
    batch_fields,
    dealer_ack,
    done_fields,
    ready_identity,
    request_fields,
    request_frames,
    routed,
)

V = C.PROTOCOL_VERSION_B
REQ, BATCH, DONE, ACK, READY = C.REQUEST_B, C.BATCH_B, C.DONE_B, C.ACK_B, C.READY_B

MSGID = b"5a1b2c3d-0000-4000-8000-00000000abcd"
FRAMES = {
    "REQUEST": [b"client-1", b"", V, REQ, MSGID, b"default", b"guarantee", b'["run",{}]'],
    "BATCH": [b"client-1", b"", V, BATCH, MSGID, pack_jobs([(MSGID, b"q", b"", b"[]")] * 4)],
    "DONE": [b"worker-1", b"", V, DONE, MSGID, MSGID, b"success", b"{}"],
    "REQUEST*": [b"client-1", b"", V, REQ, MSGID, b"default", b"guarantee", b'["run",{}]'],
    "READY": [b"worker-1", b"", V, READY, MSGID],
    "ACK": [b"", V, ACK, MSGID, MSGID],
}


def by_hand_routed(raw: list[bytes]) -> object:
    """The router before the views (frontend and backend tests as they were)."""
    n = len(raw)
    if raw[0] == b"worker-1":
        if raw[1:3] == [b"", V] and n >= 5:
            if raw[3] == READY and n == 5:
                return None
            if raw[3] == DONE and n == 8:
                return (raw[0], raw[4], raw[5], raw[6], raw[7])
        return None
    if n == 8 and raw[3] == REQ and raw[1] == b"" and raw[2] == V:
        return (raw[0], raw[4], raw[5], raw[6], raw[7])
    if n == 6 and raw[3] == BATCH and raw[1] == b"" and raw[2] == V:
        return (raw[0], raw[4], raw[5])
    return None


def with_fields_routed(raw: list[bytes]) -> object:
    """What the router does: the plain-tuple views, unpacked into names (each
    socket tries its own commands: the frontend REQUEST then BATCH, the backend
    READY then DONE)."""
    if raw[0] == b"worker-1":  # the backend's messages (the peers' test is the same)
        if ready_identity(raw) is not None:
            return None
        done = done_fields(raw)
        if done is not None:
            identity, msgid, job_msgid, status, payload = done
            return (identity, msgid, job_msgid, status, payload)
        return None
    request = request_fields(raw)
    if request is not None:
        identity, msgid, queue, headers, body = request
        return (identity, msgid, queue, headers, body)
    batch = batch_fields(raw)
    if batch is not None:
        identity, msgid, jobs = batch
        return (identity, msgid, jobs)
    return None


def with_views_routed(raw: list[bytes]) -> object:
    """The NamedTuple views (``routed``), read by attribute."""
    view = routed(raw)
    if isinstance(view, ReadyView):
        return None
    if isinstance(view, RequestView):
        return (view.identity, view.msgid, view.queue, view.headers, view.body)
    if isinstance(view, DoneView):
        return (view.identity, view.msgid, view.job_msgid, view.status, view.payload)
    if isinstance(view, BatchView):
        return (view.identity, view.msgid, view.jobs)
    return None


def by_hand_frontend(raw: list[bytes]) -> object:
    """The frontend's REQUEST path before the views: every frame read it made
    (decode checks, limits, accept with ``raw[1:]``, the ACK's msgid), no work."""
    if len(raw) == 8 and raw[3] == REQ and raw[1] == b"" and raw[2] == V:
        uses = (raw[4], raw[5], raw[6], raw[7])  # decoded
        limits = (raw[4], raw[6], raw[7])
        accept = (raw[0], raw[1:])
        return (uses, limits, accept, raw[6], raw[4], raw[3])  # refusal, hold, ACK
    return None


def with_fields_frontend(raw: list[bytes]) -> object:
    """The same reads through ``request_fields`` (the frames are rebuilt for the book)."""
    request = request_fields(raw)
    if request is not None:
        identity, msgid, queue, headers, body = request
        uses = (msgid, queue, headers, body)
        limits = (msgid, headers, body)
        accept = (identity, request_frames(msgid, queue, headers, body))
        return (uses, limits, accept, body, queue, msgid)
    return None


def with_views_frontend(raw: list[bytes]) -> object:
    view = routed(raw)
    if isinstance(view, RequestView):
        uses = (view.msgid, view.queue, view.headers, view.body)
        limits = (view.msgid, view.headers, view.body)
        accept = (view.identity, view.frames())
        return (uses, limits, accept, view.body, view.queue, view.msgid)
    return None


def by_hand_ack(frames: list[bytes]) -> object:
    if len(frames) == 5 and frames[2] == ACK and frames[1] == V:
        return frames[4]
    return None


def with_fields_ack(frames: list[bytes]) -> object:
    return acked_msgid(frames)


def with_views_ack(frames: list[bytes]) -> object:
    view = dealer_ack(frames)
    return view.ack_msgid if view is not None else None


def _ns(func: Callable[[list[bytes]], object], raw: list[bytes], number: int, repeat: int) -> float:
    times = timeit.repeat(lambda: func(raw), number=number, repeat=repeat)
    return min(times) / number * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=500_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for name, raw in FRAMES.items():
        if name not in ("ACK", "REQUEST*"):
            assert with_views_routed(raw) == by_hand_routed(raw) == with_fields_routed(raw)
    assert isinstance(dealer_ack(FRAMES["ACK"]), AckView)
    print(
        f"{'message':9s} {'by hand':>8s} {'fields':>8s} {'views':>8s}"
        f" {'fields/hand':>12s} {'views/hand':>11s}   (ns per message)"
    )
    for name, raw in FRAMES.items():
        peers = {
            "ACK": (by_hand_ack, with_fields_ack, with_views_ack),
            "REQUEST*": (by_hand_frontend, with_fields_frontend, with_views_frontend),
        }.get(name, (by_hand_routed, with_fields_routed, with_views_routed))
        # Interleaved rounds, min of each: the machine is shared.
        best = [float("inf")] * 3
        for _ in range(args.rounds):
            for i, func in enumerate(peers):
                best[i] = min(best[i], _ns(func, raw, args.number, args.repeat))
        hand, fields, views = best
        print(
            f"{name:9s} {hand:8.1f} {fields:8.1f} {views:8.1f}"
            f" {fields / hand:12.2f} {views / hand:11.2f}"
        )


if __name__ == "__main__":
    main()
