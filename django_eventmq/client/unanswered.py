"""The jobs a :class:`~.bulk.Pipeline` sent that the router has not answered yet.

REQUESTs by msgid, and BATCHes by their msgid with their jobs, each kept in
the order they were (last) sent, so the first entry is always the next due
for a resend. The pipeline sends, counts and resends; this says what is
still owed, since when, and takes a job out when the router refuses it.
"""

from __future__ import annotations

from django_eventmq.protocol.batch import pack_jobs


class SentBatch:
    """A BATCH in flight: its jobs not answered yet (msgid -> (queue, headers, body))."""

    __slots__ = ("first_sent", "frame", "jobs", "packed", "sent_at")

    def __init__(self, jobs: dict[bytes, tuple[bytes, bytes, bytes]], now: float) -> None:
        self.jobs = jobs
        self.frame = b""
        #: Jobs in ``frame``; fewer left in ``jobs`` means some were refused since.
        self.packed = 0
        self.sent_at = now
        self.first_sent = now

    def pack(self) -> bytes:
        """The JOBS frame of the jobs still waiting (packed again only if some left)."""
        if self.packed != len(self.jobs):
            self.frame = pack_jobs([(m, *rest) for m, rest in self.jobs.items()])
            self.packed = len(self.jobs)
        return self.frame


class Unanswered:
    """REQUESTs and BATCHes sent and not answered, oldest (next due) first."""

    __slots__ = ("batches", "in_batch", "requests")

    def __init__(self) -> None:
        #: REQUEST msgid -> (queue, headers, body, time sent); a resend moves it to the end.
        self.requests: dict[bytes, tuple[bytes, bytes, bytes, float]] = {}
        #: BATCH msgid -> the BATCH, oldest first like :attr:`requests`.
        self.batches: dict[bytes, SentBatch] = {}
        #: Job msgid -> the msgid of the BATCH it went in.
        self.in_batch: dict[bytes, bytes] = {}

    @property
    def any(self) -> bool:
        """Something is sent and not answered."""
        return bool(self.requests or self.batches)

    @property
    def jobs(self) -> int:
        """Jobs sent and not answered (in REQUESTs or BATCHes)."""
        return len(self.requests) + len(self.in_batch)

    def add_batch(self, batch_msgid: bytes, batch: SentBatch) -> None:
        self.batches[batch_msgid] = batch
        in_batch = self.in_batch
        for msgid in batch.jobs:
            in_batch[msgid] = batch_msgid

    def oldest_sent(self) -> float | None:
        """When the REQUEST or BATCH due first was sent (None: nothing is)."""
        times = []
        if self.requests:
            times.append(next(iter(self.requests.values()))[3])
        if self.batches:
            times.append(next(iter(self.batches.values())).sent_at)
        return min(times) if times else None

    def queues(self) -> list[str]:
        """The queues of the jobs sent and not answered yet."""
        return sorted(
            {q.decode() for q, *_ in self.requests.values()}
            | {q.decode() for b in self.batches.values() for q, *_ in b.jobs.values()}
        )

    def refused(self, msgid: bytes) -> bytes | None:
        """Take a job the router refused out; its queue (None: not one of ours)."""
        entry = self.requests.pop(msgid, None)
        if entry is not None:
            return entry[0]
        batch_msgid = self.in_batch.pop(msgid, None)
        if batch_msgid is None:
            return None
        batch = self.batches[batch_msgid]
        queue = batch.jobs.pop(msgid)[0]
        if not batch.jobs:
            del self.batches[batch_msgid]  # all refused: its ACK says nothing more
        return queue
