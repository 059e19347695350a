"""Many byte fields in one frame: a text head of their lengths, then their bytes.

``HEAD '\\n' DATA``: ``HEAD`` is the fields' byte lengths in ASCII decimal,
separated by commas; ``DATA`` is the fields back to back. BATCH carries a
batch's jobs this way (:mod:`.batch`) and a packed message its frames
(:mod:`.packed`). Building it is one ``join`` plus one format; reading it is
one parse of the head and one slice per field, both far cheaper in Python
than a ZeroMQ frame each.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import accumulate

from django_eventmq.errors import ProtocolError

#: Longest decimal length in the head: 10 digits is more than any frame holds.
MAX_DIGITS = 10

_read_lengths = json.JSONDecoder().decode


def join_fields(fields: Sequence[bytes]) -> bytes:
    """One frame holding ``fields`` (at least one)."""
    # One C-level format for the whole head: twice as fast as joining str()s.
    head = b"%d," * len(fields) % tuple(map(len, fields))
    return head[:-1] + b"\n" + b"".join(fields)


def read_numbers(head: bytes, *, what: str, kind: str) -> list[int]:
    """The comma-separated decimal numbers of ``head``; :class:`ProtocolError`
    naming ``what`` (and that ``kind`` was expected) if it holds anything else."""
    # bytes.isdigit() is ASCII only, so the head holds decimal digits and commas
    # alone; read as a JSON array, an empty number (',,') or a leading zero ('01')
    # is refused too: one way to write each. (JSON's C parser reads a long head
    # three times faster than split() and int().)
    try:
        if not head.replace(b",", b"").isdigit():
            raise ValueError(head)
        numbers: list[int] = _read_lengths(f"[{head.decode()}]")
    except ValueError:
        shown = f"{head[:40]!r}{'...' if len(head) > 40 else ''}"
        raise ProtocolError(
            f"{what}: the head must be comma-separated decimal {kind}, got {shown}"
        ) from None
    return numbers


def field_bounds(frame: bytes, *, what: str, max_fields: int) -> list[int]:
    """Where each field of ``frame`` starts, then where the last ends (``n + 1``
    offsets); :class:`ProtocolError` naming ``what`` if it is not such a frame."""
    end = frame.find(b"\n", 0, max_fields * (MAX_DIGITS + 1))
    if end < 0:
        raise ProtocolError(f"{what}: no head (lengths, then a newline)")
    lengths = read_numbers(frame[:end], what=what, kind="lengths")
    if len(lengths) > max_fields:
        raise ProtocolError(f"{what}: {len(lengths)} fields, more than {max_fields}")
    ends = list(accumulate(lengths, initial=end + 1))
    if ends[-1] != len(frame):
        raise ProtocolError(
            f"{what}: the head's lengths add up to {ends[-1] - end - 1} bytes, "
            f"the fields take {len(frame) - end - 1}"
        )
    return ends
