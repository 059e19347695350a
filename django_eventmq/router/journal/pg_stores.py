"""The PostgreSQL journal's stores beside the jobs, as mixins over
:class:`.pg_commit.PgJournalBase`: parcels (see :mod:`.parcels`), finished
msgids (see :mod:`.finished`) and the SCHEDULE / UNSCHEDULE messages kept for a
scheduler (see :mod:`.schedules`)."""

from __future__ import annotations

from collections.abc import Container

from django_eventmq.protocol.batch import unpack_jobs
from django_eventmq.router.journal.parcels import parcel_digest
from django_eventmq.router.journal.pg_commit import PgJournalBase
from django_eventmq.router.journal.schedules import pack_frames, unpack_frames
from django_eventmq.router.journal.schema import WAITING, Parcel, new_row


class PgParcelStore(PgJournalBase):
    """The parcels of :class:`.postgres.PostgresJournal`."""

    # -- parcels (see parcels.py) ----------------------------------------------------------------
    def add_parcel(self, parcel: Parcel) -> None:
        """Store ``parcel`` as one row (its ``count`` jobs take seqs ``seq .. seq +
        count - 1``). Kept until the next flush (a commit, or a read of parcels), like
        the jobs' writes: nothing waits on it before then."""
        p = parcel
        seq, count, queue, jobs = p.seq, p.count, p.queue, p.jobs
        digest = parcel_digest(jobs) if p.digest is None else p.digest
        self._begin(count)
        self._new_parcels.append(
            (
                seq,
                count,
                queue.encode(),
                -p.priority,
                p.guarantee,
                p.headers,
                p.client,
                p.accepted,
                jobs,
            )
        )
        # The same frame's digest held by an earlier parcel gives way (SQLite's REPLACE).
        earlier = self._digests.get(digest)
        if earlier is not None:
            del self._digest_of[earlier]
        self._digests[digest] = seq
        self._digest_of[seq] = digest
        self._parcels[queue] += 1

    def holds_parcel(self, digest: bytes) -> bool:
        """True if a parcel not opened yet has the JOBS frame of this digest (known
        in memory: see :class:`.pg_commit.PgJournalBase`)."""
        self._alive()
        return digest in self._digests

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
            "SELECT nprio, seq FROM parcels WHERE queue = %s ORDER BY nprio, seq LIMIT 1",
            (queue.encode(),),
        )
        if not rows or (upto is not None and tuple(rows[0]) > upto):
            return None
        return int(rows[0][1])

    def parcels_holding(self, msgid: str) -> list[int]:
        """Parcels whose JOBS frame contains ``msgid`` (open them, then :meth:`find`)."""
        if not self._parcels.total():
            return []
        self._fresh()
        rows = self._select(
            "SELECT seq FROM parcels WHERE position(%s IN jobs) > 0 ORDER BY seq",
            (msgid.encode(),),
        )
        return [int(seq) for (seq,) in rows]

    def open_parcel(self, seq: int, skip: Container[str]) -> tuple[str, int]:
        """Turn parcel ``seq`` into a WAITING row per job. Returns its queue and how
        many jobs were dropped: their msgid was held already, or is in ``skip``."""
        self._fresh()
        (count, queue, nprio, guarantee, headers, client, accepted, frame) = self._select(
            "SELECT count, queue, nprio, guarantee, headers, client, accepted, jobs"
            " FROM parcels WHERE seq = %s",
            (seq,),
        )[0]
        name = queue.decode()
        jobs = unpack_jobs(frame, max_jobs=count, max_bytes=len(frame))
        rows = [
            new_row(seq=seq + i, msgid=msgid, queue=name, priority=-nprio, state=WAITING,
                    guarantee=guarantee, headers=headers, body=job[3], client=client,
                    accepted=accepted)
            for i, job in enumerate(jobs)
            if (msgid := job[0].decode()) not in skip
        ]  # fmt: skip
        with self._guard():
            stored = self._insert_jobs(rows) if rows else 0
            self._now("DELETE FROM parcels WHERE seq = %s", (seq,))
            self._now("DELETE FROM parcel_digests WHERE seq = %s", (seq,))
            self.pending += len(rows) + 1
        digest = self._digest_of.pop(seq, None)
        if digest is not None:
            del self._digests[digest]
        self._parcels[name] -= 1
        return name, int(count) - stored


class PgFinishedStore(PgJournalBase):
    """The finished msgids of :class:`.postgres.PostgresJournal` (pruned in a commit:
    :meth:`.pg_commit.PgJournalBase._prune_finished`)."""

    # -- finished msgids (see finished.py) -------------------------------------------------
    def finished_since(self, since: float) -> list[tuple[str, float]]:
        """The newest ``finished_keep`` msgids finished at or after ``since``, oldest first."""
        self._fresh()
        rows = self._select(
            "SELECT msgid, at FROM finished WHERE at >= %s ORDER BY seq DESC LIMIT %s",
            (since, self.finished_keep),
        )
        rows.reverse()
        return [(msgid.decode(), float(at)) for msgid, at in rows]

    def prune_finished(self) -> None:
        """Drop finished msgids past the window or the count now (at start-up)."""
        self._fresh()
        with self._guard():
            self._tx()
            self.pending += 1
            self._prune_finished(self._finished_clock(), force=True)

    def finished_count(self) -> int:
        self._fresh()
        return int(self._select("SELECT COUNT(*) FROM finished")[0][0])


class PgScheduleStore(PgJournalBase):
    """The kept SCHEDULE / UNSCHEDULE messages of :class:`.postgres.PostgresJournal`."""

    # -- SCHEDULE / UNSCHEDULE waiting for a scheduler (see schedules.py) ---------------------
    def add_schedule(
        self, frames: list[bytes], *, unschedule: bool, job_key: str, timing_key: str
    ) -> None:
        """Keep a SCHEDULE or UNSCHEDULE (its frames as received) for a scheduler."""
        self._write(
            "INSERT INTO schedules (unschedule, job_key, timing_key, frames)"
            " VALUES (%s, %s, %s, %s)",
            (unschedule, job_key.encode(), timing_key.encode(), pack_frames(frames)),
        )

    def drop_schedules(self, job_key: str, timing_key: str) -> int:
        """An UNSCHEDULE's effect on kept SCHEDULEs: drop the job's (all timings if
        ``timing_key`` is empty). Returns how many were dropped."""
        if timing_key:
            return self._write(
                "DELETE FROM schedules WHERE NOT unschedule AND job_key = %s AND timing_key = %s",
                (job_key.encode(), timing_key.encode()),
            )
        return self._write(
            "DELETE FROM schedules WHERE NOT unschedule AND job_key = %s", (job_key.encode(),)
        )

    def keep_unschedule(self, frames: list[bytes], job_key: str, timing_key: str) -> int:
        """Keep an UNSCHEDULE and drop the kept SCHEDULEs it names, in one transaction
        (any failure here kills it whole). Returns how many it dropped."""
        dropped = self.drop_schedules(job_key, timing_key)
        self.add_schedule(frames, unschedule=True, job_key=job_key, timing_key=timing_key)
        return dropped

    def schedules(self, limit: int = 1000) -> list[tuple[int, bool, list[bytes]]]:
        """The oldest ``limit`` kept messages, oldest first: ``(seq, is UNSCHEDULE, frames)``."""
        return [
            (int(seq), bool(unschedule), unpack_frames(packed))
            for seq, unschedule, packed in self._select(
                "SELECT seq, unschedule, frames FROM schedules ORDER BY seq LIMIT %s", (limit,)
            )
        ]

    def delete_schedule(self, seq: int) -> None:
        self._write("DELETE FROM schedules WHERE seq = %s", (seq,))

    def schedule_count(self) -> int:
        return int(self._select("SELECT COUNT(*) FROM schedules")[0][0])
