"""Length-prefixed frames over a socketpair: frames bigger than one read, split
headers and many frames per read all come out whole and in order."""

from __future__ import annotations

import socket
import threading

import pytest

from django_eventmq.jobmanager.pipe import READ_SIZE, FrameReader, frame, write_all


def read_frames(reader: FrameReader, n: int) -> list[bytes]:
    frames: list[bytes] = []
    while len(frames) < n:
        frames.extend(reader.read())
    return frames


def test_frames_bigger_than_one_read_and_many_small_ones_come_out_whole() -> None:
    ours, theirs = socket.socketpair()
    try:
        sent = [
            b"a" * (3 * READ_SIZE + 7),
            b"",
            b"small",
            b"b" * READ_SIZE,
            *(b"%d" % i for i in range(500)),
        ]
        writer = threading.Thread(
            target=write_all, args=(theirs.fileno(), b"".join(frame(f) for f in sent))
        )
        writer.start()
        assert read_frames(FrameReader(ours.fileno()), len(sent)) == sent
        writer.join(10)
    finally:
        ours.close()
        theirs.close()


def test_a_header_split_across_writes_is_kept_for_the_next_read() -> None:
    ours, theirs = socket.socketpair()
    try:
        reader = FrameReader(ours.fileno())
        data = frame(b"hello") + frame(b"world")
        theirs.sendall(data[:2])  # half a length prefix
        assert reader.read() == []
        theirs.sendall(data[2:11])  # the first frame and part of the second's prefix
        assert reader.read() == [b"hello"]
        theirs.sendall(data[11:])
        assert reader.read() == [b"world"]
    finally:
        ours.close()
        theirs.close()


def test_a_closed_pipe_raises_eof() -> None:
    ours, theirs = socket.socketpair()
    theirs.close()
    try:
        with pytest.raises(EOFError):
            FrameReader(ours.fileno()).read()
    finally:
        ours.close()
