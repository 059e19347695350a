"""Parcels: a BATCH whose jobs share a queue and headers, arriving while its
queue already waits on disk, is stored as one row holding its JOBS frame as
received (``parcels``), not as a row per job: the jobs' seqs are reserved
(``seq .. seq + count - 1``) and nothing is indexed per job. A parcel is
opened, into a WAITING row per job, when its queue reaches it or a CANCEL
names one of its jobs; a job whose msgid is held already or finished
recently is dropped then (a duplicate found late rather than at once). The
SHA-256 of each stored parcel's JOBS frame is kept (``parcel_digests``): the
same BATCH sent again (a Spark task retried, an export sent again with the
same run_id) is known at once, and neither stored nor counted again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Container

from django_eventmq.protocol.batch import unpack_jobs
from django_eventmq.router.journal.commit import JournalBase
from django_eventmq.router.journal.schema import INSERT_JOB, WAITING, Parcel, new_row


class ParcelStore(JournalBase):
    """The parcels of :class:`.store.Journal`."""

    # -- parcels: a BATCH stored whole (see the module doc) ----------------------
    def add_parcel(self, parcel: Parcel) -> None:
        """Store ``parcel`` as one row (its ``count`` jobs take seqs ``seq .. seq +
        count - 1``)."""
        p = parcel
        jobs = p.jobs
        self._now_all(
            [
                (
                    "INSERT INTO parcels (seq, count, queue, nprio, guarantee, headers, client,"
                    " accepted, jobs) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (p.seq, p.count, p.queue, -p.priority, p.guarantee, p.headers, p.client,
                     p.accepted, jobs),
                    False,
                ),
                (
                    # REPLACE: a digest left by a parcel lost in a salvage gives way.
                    "INSERT OR REPLACE INTO parcel_digests (seq, digest) VALUES (?, ?)",
                    (p.seq, parcel_digest(jobs) if p.digest is None else p.digest),
                    False,
                ),
            ],
            p.count,
        )  # fmt: skip
        self._parcels[p.queue] += 1

    def holds_parcel(self, digest: bytes) -> bool:
        """True if a parcel not opened yet has the JOBS frame whose
        :func:`parcel_digest` is ``digest``: every job of that frame is held."""
        if not self._parcels.total():
            return False
        # Joined: a digest whose parcel --journal-recover could not copy (a big
        # blob, unreadable) holds nothing; its BATCH sent again must be stored.
        found = self._execute(
            "SELECT 1 FROM parcel_digests JOIN parcels USING (seq) WHERE digest = ?", (digest,)
        )
        return found.fetchone() is not None

    def parcel_count(self) -> int:
        """Parcels stored and not opened yet."""
        return self._parcels.total()

    def next_parcel(self, queue: str, upto: tuple[int, int] | None) -> int | None:
        """The first parcel of ``queue`` in hand-out order, if its first job's key
        ``(nprio, seq)`` is at most ``upto`` (None: whatever it is)."""
        if not self._parcels[queue]:
            return None
        self._fresh()
        rows = self._select(
            "SELECT nprio, seq FROM parcels WHERE queue = ? ORDER BY nprio, seq LIMIT 1", (queue,)
        )
        found = rows[0] if rows else None
        if found is None or (upto is not None and tuple(found) > upto):
            return None
        return int(found[1])

    def parcels_holding(self, msgid: str) -> list[int]:
        """Parcels whose JOBS frame contains ``msgid`` (a body may contain it too:
        open them, then :meth:`find`)."""
        if not self._parcels.total():
            return []
        self._fresh()
        cursor = self._select(
            "SELECT seq FROM parcels WHERE instr(jobs, ?) > 0 ORDER BY seq", (msgid.encode(),)
        )
        return [int(seq) for (seq,) in cursor]

    def open_parcel(self, seq: int, skip: Container[str]) -> tuple[str, int]:
        """Turn parcel ``seq`` into a WAITING row per job. Returns its queue and how
        many jobs were dropped: their msgid was held already, or is in ``skip``."""
        self._fresh()  # kept rows first, so the insert sees their msgids
        (count, queue, nprio, guarantee, headers, client, accepted, frame) = self._select(
            "SELECT count, queue, nprio, guarantee, headers, client, accepted, jobs"
            " FROM parcels WHERE seq = ?",
            (seq,),
        )[0]
        # We stored the frame after checking it: this cannot fail on a good journal.
        jobs = unpack_jobs(frame, max_jobs=count, max_bytes=len(frame))
        rows = [
            new_row(seq=seq + i, msgid=msgid, queue=queue, priority=-nprio, state=WAITING,
                    guarantee=guarantee, headers=headers, body=job[3], client=client,
                    accepted=accepted)
            for i, job in enumerate(jobs)
            if (msgid := job[0].decode()) not in skip
        ]  # fmt: skip
        inserted = self._now_all(
            [
                (INSERT_JOB, rows, True),
                ("DELETE FROM parcels WHERE seq = ?", (seq,), False),
                ("DELETE FROM parcel_digests WHERE seq = ?", (seq,), False),
            ],
            len(rows) + 1,
        )
        stored = inserted[0].rowcount
        self._parcels[queue] -= 1
        return queue, count - stored


def parcel_digest(jobs: bytes) -> bytes:
    """What tells a parcel's JOBS frame from any other (SHA-256: about 45 us for a
    500-job frame here, against the milliseconds its jobs cost the router)."""
    return hashlib.sha256(jobs).digest()
