"""Length-prefixed frames over a worker child's pipe, written and read in bulk.

A job manager and its worker child talk over two one-way pipes (made by
``multiprocessing.Pipe(duplex=False)``; one socketpair costs about twice as
much in the kernel per small write or read). ``Connection.send_bytes``/``recv_bytes`` cost two
or three system calls per message; here several frames go out in one
``write`` and one ``read`` takes in everything waiting, which matters when a
child runs thousands of tiny jobs a second.

Frame: 4-byte big-endian length, then that many bytes. The first byte of a
frame's data says what it is (see :mod:`.child`).
"""

from __future__ import annotations

import os
import struct

_HEADER = struct.Struct("!I")
_unpack_header = _HEADER.unpack_from

#: Most bytes taken in by one read. Kept under glibc's mmap threshold (128 KiB):
#: ``os.read`` allocates a buffer of this size first, and one that big was
#: mapped and unmapped on every call, about 17 us a read on the test machine
#: (benchmarks/README.md), more than the rest of the read.
READ_SIZE = 64 * 1024


def frame(data: bytes) -> bytes:
    """``data`` with its length prefix, ready to be joined with other frames."""
    return _HEADER.pack(len(data)) + data


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` (a blocking write may still return short)."""
    written = os.write(fd, data)
    if written == len(data):
        return  # the common case: no view to make
    view = memoryview(data)[written:]
    while view:
        written = os.write(fd, view)
        view = view[written:]


class FrameReader:
    """Splits what arrives on ``fd`` into frames, keeping a partial frame for the next read."""

    __slots__ = ("_buffer", "drained", "fd")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = bytearray()
        #: The last read took less than it could: nothing more was waiting then.
        self.drained = False

    def read(self) -> list[bytes]:
        """One ``read`` (blocks if nothing is waiting); the complete frames it made.

        Raises :class:`EOFError` when the other end has closed.
        """
        data = os.read(self.fd, READ_SIZE)
        if not data:
            raise EOFError("pipe closed")
        self.drained = len(data) < READ_SIZE
        buffer = self._buffer
        if not buffer and len(data) >= 4 and _unpack_header(data)[0] + 4 == len(data):
            return [data[4:]]  # the common case: exactly one frame
        buffer += data
        frames: list[bytes] = []
        pos, end = 0, len(buffer)
        while end - pos >= 4:
            stop = pos + 4 + _unpack_header(buffer, pos)[0]
            if stop > end:
                break
            frames.append(bytes(buffer[pos + 4 : stop]))
            pos = stop
        del buffer[:pos]
        return frames
