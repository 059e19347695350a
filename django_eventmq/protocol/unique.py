"""Unique jobs on the wire: the key a client computes, and the REJECT that refuses one.

A unique job carries ``unique-key:<hex>`` (and maybe ``unique-for:<seconds>``,
:mod:`.headers`). The key is a digest of the job's dotted name and a string
that stands for its arguments, so two senders that mean the same job compute
the same key without asking anyone. A router of ours that already holds a job
with that key answers the REQUEST with a REJECT whose reason starts with
:data:`NOT_UNIQUE` and names the msgid of the job that holds it;
:func:`holder_of` reads it back. A reference peer keeps the headers as unknown
ones and never sees such a REJECT.
"""

from __future__ import annotations

import hashlib

#: How a REJECT reason for a job refused as not unique starts.
NOT_UNIQUE = "not unique: job "
_HOLDS = " already holds its unique key"


def unique_key(job_name: str, part: str) -> str:
    """The ``unique-key`` header value: SHA-256 of the job's dotted name and ``part``
    (the JSON of its arguments, or what its ``unique_key`` callable returned), in hex."""
    digest = hashlib.sha256()
    digest.update(job_name.encode())
    digest.update(b"\0")  # "a" + "bc" and "ab" + "c" differ
    digest.update(part.encode())
    return digest.hexdigest()


def not_unique_reason(holder: str, why: str) -> str:
    """The REJECT reason for a job refused because job ``holder`` holds its key;
    ``why`` says until when (queued or running, or for how many more seconds)."""
    return (
        f"{NOT_UNIQUE}{holder}{_HOLDS} ({why}); use that job, or send this one again once "
        "the key is free"
    )


def holder_of(reason: str) -> str | None:
    """The msgid of the job holding the key, if ``reason`` refuses a job as not unique."""
    if not reason.startswith(NOT_UNIQUE):
        return None
    holder, found, _ = reason[len(NOT_UNIQUE) :].partition(_HOLDS)
    return holder if found and holder else None
