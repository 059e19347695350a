"""Bundles: many eMQP messages in one frame, between peers of ours (our extension).

A bundle is one frame::

    'B' COUNT ',' FRAMES_1 ',' ... ',' FRAMES_N ',' LENGTHS '\\n' DATA

``COUNT`` is how many messages it carries (``N``), ``FRAMES_i`` how many
frames message ``i`` has, ``LENGTHS`` the byte length of every frame of every
message in order, all in ASCII decimal separated by commas. ``DATA`` is those
frames back to back. Each message is the frames a DEALER would send,
``['', 'eMQP/1.0', COMMAND, MSGID, *body]``, so the frame is UTF-8 text like
every eMQP frame. A ROUTER sees it as ``[identity, BUNDLE]``, a DEALER as
``[BUNDLE]``: one frame, as a packed message (:mod:`.packed`), which starts
``0,8,`` where a bundle starts ``B``; an ordinary message has at least four
frames. So the three forms cannot be confused.

Why: a peer that hands out, or reports, many jobs in one loop turn pays one
ZeroMQ send and one receive for the turn instead of one per message. The
format measured against the other reasonable choice, a
:func:`~.fields.join_fields` of packed messages (16 DONEs, build then parse):
this one costs about 27 us, the nested one about 59 us (a head parse per
message instead of one for the bundle).

Who sends it (only to a peer whose FEATURES said ``"bundle"``, whose value is
the largest frame that peer takes, where the sender cuts; the reference's peers
never see one): our router the jobs one turn hands out to one job manager and
the ACKs one commit releases to one client, and our job manager the messages
(DONE, READY, ...) one of its turns produces. Every receiver of ours takes
bundles from anyone.

What is checked here is the bundle's structure: the head, the counts (1 to
``max_messages`` messages, 1 to ``max_frames`` frames each), the lengths
adding up, the size. A bundle that fails is malformed as a whole: its
receiver logs it and drops it. Each message it carries then gets exactly
the checks (and handling) it would get had it come alone, frame by frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate, chain, pairwise

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import constants as C
from django_eventmq.protocol.fields import MAX_DIGITS, read_numbers
from django_eventmq.protocol.limits import MAX_MESSAGE_BYTES

#: The FEATURES key that says "send me bundles of at most this many bytes, I read them".
BUNDLE = "bundle"
#: How every bundle starts (a packed message starts with a digit).
PREFIX = b"B"
#: Most messages in one bundle.
MAX_BUNDLE_MESSAGES = 1000
#: Most frames of one message in a bundle (as :data:`.codec.MAX_FRAMES`).
MAX_BUNDLE_FRAMES = 32

_PREFIX_LEN = len(PREFIX)
#: Most bytes a frame adds to the head (its length and a comma), and a message (its count).
_HEAD_PER_FRAME = MAX_DIGITS + 1
#: The bytes of a bundle beyond its messages' :func:`size_bound`: prefix, message count, newline.
_BUNDLE_HEAD = _PREFIX_LEN + _HEAD_PER_FRAME


def bundle(
    messages: Sequence[Sequence[bytes]],
    *,
    max_messages: int = MAX_BUNDLE_MESSAGES,
    max_bytes: int = MAX_MESSAGE_BYTES,
) -> bytes:
    """One frame carrying ``messages`` (each the frames a DEALER sends): 1 to
    ``max_messages`` of them, in at most ``max_bytes``, or :class:`ProtocolError`
    saying which limit. The frames are not checked: a sender bundles messages it
    built. :func:`runs` says how to cut many messages into bundles within the limits."""
    count = len(messages)
    if not 1 <= count <= max_messages:
        raise ProtocolError(f"bundle: carries 1 to {max_messages} messages, got {count}")
    frames = list(chain.from_iterable(messages))
    numbers = (count, *map(len, messages), *map(len, frames))
    head = b"%d," * len(numbers) % numbers
    frame = b"".join((PREFIX, head[:-1], b"\n", *frames))
    if len(frame) > max_bytes:
        raise ProtocolError(f"bundle: {len(frame)} bytes, more than {max_bytes}")
    return frame


def size_bound(frames: Sequence[bytes]) -> int:
    """An upper bound of the bytes a message adds to a bundle (head included)."""
    return sum(map(len, frames)) + (len(frames) + 1) * _HEAD_PER_FRAME


def runs(
    messages: Sequence[Sequence[bytes]],
    *,
    max_messages: int = MAX_BUNDLE_MESSAGES,
    max_bytes: int = MAX_MESSAGE_BYTES,
) -> list[int]:
    """How many of ``messages``, run by run in order, go in one frame: a run of one
    goes alone (a message too big to share a bundle is one), a longer one as a
    :func:`bundle` within the limits."""
    count = len(messages)
    if count <= max_messages:
        # The common case, all in one: one C-level pass over every frame.
        frames = list(chain.from_iterable(messages))
        if (
            sum(map(len, frames)) + (len(frames) + count) * _HEAD_PER_FRAME + _BUNDLE_HEAD
            <= max_bytes
        ):
            return [count] if count else []
    out: list[int] = []
    taken = 0
    size = _BUNDLE_HEAD
    for grow in map(size_bound, messages):
        if taken and (size + grow > max_bytes or taken == max_messages):
            out.append(taken)
            taken, size = 0, _BUNDLE_HEAD
        taken += 1
        size += grow
    if taken:
        out.append(taken)
    return out


def is_bundle(frame: bytes) -> bool:
    """``frame`` (a one-frame message) is a bundle, well-formed or not."""
    return frame.startswith(PREFIX)


def unbundle(
    frame: bytes,
    first: Sequence[bytes] = (),
    *,
    max_messages: int = MAX_BUNDLE_MESSAGES,
    max_frames: int = MAX_BUNDLE_FRAMES,
    max_bytes: int = MAX_MESSAGE_BYTES,
) -> list[list[bytes]]:
    """The messages a bundle carries, each its frames after ``first`` (a ROUTER
    passes ``[identity]``: each message then looks as it would have come alone);
    :class:`ProtocolError` saying why if ``frame`` is not a well-formed bundle."""
    if not frame.startswith(PREFIX):
        raise ProtocolError(f"bundle: must start with {PREFIX.decode()!r}")
    if len(frame) > max_bytes:
        raise ProtocolError(f"bundle: larger than {max_bytes} bytes")
    # The head holds at most one count and max_frames lengths per message, and N.
    most = (max_messages * (max_frames + 1) + 1) * _HEAD_PER_FRAME + _PREFIX_LEN
    end = frame.find(b"\n", 0, most)
    if end < 0:
        raise ProtocolError("bundle: no head (counts and lengths, then a newline)")
    numbers = read_numbers(frame[_PREFIX_LEN:end], what="bundle", kind="numbers")
    count = numbers[0]
    if not 1 <= count <= max_messages:
        raise ProtocolError(f"bundle: carries 1 to {max_messages} messages, says {count}")
    counts = numbers[1 : count + 1]
    if len(counts) < count:
        raise ProtocolError(
            f"bundle: says {count} messages, the head counts frames of {len(counts)}"
        )
    if min(counts) < 1 or max(counts) > max_frames:
        raise ProtocolError(f"bundle: a message must have 1 to {max_frames} frames")
    lengths = numbers[count + 1 :]
    if len(lengths) != sum(counts):
        raise ProtocolError(
            f"bundle: its messages have {sum(counts)} frames, the head has {len(lengths)} lengths"
        )
    ends = list(accumulate(lengths, initial=end + 1))
    if ends[-1] != len(frame):
        raise ProtocolError(
            f"bundle: the head's lengths add up to {ends[-1] - end - 1} bytes, "
            f"the frames take {len(frame) - end - 1}"
        )
    frames = [frame[a:b] for a, b in pairwise(ends)]
    first = list(first)
    out: list[list[bytes]] = []
    at = 0
    for n in counts:
        out.append(first + frames[at : at + n])
        at += n
    return out


#: The frames of an ACK before its two msgids, back to back: '', the version, ACK.
_ACK_START = C.PROTOCOL_VERSION_B + C.ACK_B
#: The head's numbers of an ACK before its two msgids' lengths: its frame count,
#: then the lengths of '', the version and ACK (as :func:`bundle` writes them).
_ACK_FRAMES = 5
_ACK_LENGTHS = b"0,%d,%d," % (len(C.PROTOCOL_VERSION_B), len(C.ACK_B))


def ack_bundle(
    msgids: Sequence[bytes],
    ack_msgids: Sequence[bytes],
    *,
    max_messages: int = MAX_BUNDLE_MESSAGES,
    max_bytes: int = MAX_MESSAGE_BYTES,
) -> bytes | None:
    """:func:`bundle` of the ACKs (msgid ``msgids[i]``) of ``ack_msgids``, built
    straight from the msgids (the router's ACKs of a commit, its common case); the
    same bytes. None when they do not fit one bundle (:func:`runs` cuts them)."""
    count = len(ack_msgids)
    if not 1 <= count <= max_messages:
        return None
    lengths = tuple(chain.from_iterable(zip(map(len, msgids), map(len, ack_msgids), strict=True)))
    head = b"%s%d," % (PREFIX, count) + b"%d," % _ACK_FRAMES * count
    head += (_ACK_LENGTHS + b"%d,%d,") * count % lengths
    data = chain.from_iterable(zip([_ACK_START] * count, msgids, ack_msgids, strict=True))
    frame = b"".join((head[:-1], b"\n", *data))
    return frame if len(frame) <= max_bytes else None
