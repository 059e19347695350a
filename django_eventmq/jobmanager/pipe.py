"""The pipes between a job manager and its worker children: frames and what they say.

Both sides use this module (the parent in :mod:`.pool`, the child in
:mod:`.worker_process`); neither imports the other's.

A job manager and its worker child talk over two one-way pipes (made by
``multiprocessing.Pipe(duplex=False)``; one socketpair costs about twice as
much in the kernel per small write or read). ``Connection.send_bytes``/``recv_bytes`` cost two
or three system calls per message; here several frames go out in one
``write`` and one ``read`` takes in everything waiting, which matters when a
child runs thousands of tiny jobs a second.

Frame: 4-byte big-endian length, then that many bytes. The first byte of a
frame's data says what it is.

Frames, parent -> child (first byte says what):

- ``J<seq>\\n<job body JSON>``: run a job (several may come in one write);
  ``J<seq>:<seconds>\\n<job body JSON>`` with a soft time limit (the job's
  ``soft-timeout`` header; :mod:`.invoke` raises ``SoftTimeLimitExceeded``
  inside the job when it passes); a traced job's head ends with
  ``\\t<msgid>\\t<queue>\\t<traceparent>\\t<tracestate>`` (its ``run`` span's
  parent, :mod:`..runtime.tracing`); the head ends with ``\\x1e<context>``,
  what the job manager knows of the job (attempt, msgid, queue, headers:
  ``runtime.job_context.encode_line``, which never holds ``\\x1e`` or a line
  break), for ``current_job()`` and the job signals;
- ``J*<seq>...``: the same for an ``async def`` job, which runs beside other
  async jobs on the child's event loop (:mod:`.tasks`; at most
  ``ASYNC_CONCURRENCY`` at once, in the order they came; a plain job waits
  until they are done, and async jobs behind it wait for it);
- ``C<seq>``: cancel job ``seq`` if it has not started, or if it is an async
  job running on the loop (answered with a ``cancelled`` result; ignored
  when it already ran);
- ``X``: exit once the jobs before it are done.

Outcome records come on a pipe of their own, ``R<JSON list>`` frames for
``hooks.record_results``, each answered ``A`` on the pipe out. A thread of the
child writes them, so a record (a job's RUNNING row, its progress) never
waits for the job the child is running.

Child -> parent: ``U`` once ready (``Ur`` if the hooks module records
results; then, after a line break, the names of the registered ``async def``
jobs it runs concurrently, one a line), ``F<why>`` when start-up failed (then
it exits), ``A`` after a records batch, ``B<names>`` last, as it stops serving
(``names``: the non-daemon threads a job left running, which keep the process
from exiting; empty: none), ``P<seq>\\n<{"value": ...} JSON>`` for a partial a running
job reports (:mod:`.progress`; at most ``PARTIAL_RATE`` a second per job), and
per job ``D<seq>\\n<status>\\n<payload JSON>`` where status
is one of ``protocol.status.CHILD_STATUSES``: ``ok`` (payload is the reply
``{"value": ...}``), ``failed`` or ``refused``
(payload describes the error: ``{"job", "type", "path", "message", "traceback"}``) or
``cancelled`` (skipped, empty payload). A result is written as soon as its job
ends: the job manager times the next job from it.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any

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


# -- what the frames say --------------------------------------------------------
# Frame kinds (first byte), parent -> child:
JOB = b"J"
#: How a ``J`` frame of an async job that runs beside others starts.
ASYNC_JOB = b"J*"
CANCEL = b"C"
RECORDS = b"R"  # on the records pipe
EXIT = b"X"
# child -> parent:
UP, FAIL, BYE = b"U", b"F", b"B"
RESULT = b"D"
PARTIAL = b"P"
RECORDED = b"A"
#: Before a job's context line, last in the head of its ``J`` frame.
CONTEXT = b"\x1e"
#: After UP: the hooks module has ``record_results``.
CAN_RECORD = b"r"

#: Partials per second per job that leave a job manager; faster reports are
#: coalesced, in the child (:class:`.progress.PartialGate`) and in the job
#: manager (:class:`.partials.Coalescer`).
PARTIAL_RATE = 20
PARTIAL_INTERVAL = 1.0 / PARTIAL_RATE


def encode_job(
    seq: int,
    body_text: str,
    soft_timeout: int | None = None,
    trace: bytes = b"",
    context: bytes = b"",
    concurrent: bool = False,
) -> bytes:
    """A ``J`` frame; ``trace``: the trace carrier of a traced job (runtime/tracing.py);
    ``context``: its context line (``job_context.encode_line``); ``concurrent``: an
    async job, run beside others (``J*``)."""
    kind = ASYNC_JOB if concurrent else JOB
    head = b"%s%d:%d" % (kind, seq, soft_timeout) if soft_timeout else b"%s%d" % (kind, seq)
    if trace:
        head += b"\t" + trace
    return b"%s%s%s\n%s" % (head, CONTEXT if context else b"", context, body_text.encode())


def decode_job_frame(data: bytes) -> tuple[bytes, int | None, bytes, bytes, bytes]:
    """``(seq, soft timeout or None, body, trace carrier or b"", context line or b"")``
    from a ``J`` frame."""
    head, _, body = data[1:].partition(b"\n")
    head, mark, context = head.rpartition(CONTEXT)
    if not mark:  # no context: rpartition put it all last
        head, context = context, b""
    head, _, trace = head.partition(b"\t")
    seq, _, soft = head.partition(b":")
    return seq, int(soft) if soft else None, body, trace, context


def encode_result(seq: bytes, status: str, payload: str) -> bytes:
    return b"D%s\n%s\n%s" % (seq, status.encode(), payload.encode())


def encode_partial_frame(seq: bytes, payload: str) -> bytes:
    return b"P%s\n%s" % (seq, payload.encode())


def decode_partial_frame(data: bytes) -> tuple[int, str]:
    """``(seq, payload)`` from a child's ``P`` frame."""
    seq, payload = data[1:].split(b"\n", 1)
    return int(seq), payload.decode()


def decode_result(data: bytes) -> tuple[int, str, str]:
    """``(seq, status, payload)`` from a child's ``D`` frame."""
    seq, status, payload = data[1:].split(b"\n", 2)
    return int(seq), status.decode(), payload.decode()


def encode_records(records: list[dict[str, Any]]) -> bytes:
    return RECORDS + json.dumps(records, separators=(",", ":"), default=repr).encode()
