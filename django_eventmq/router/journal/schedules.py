"""The SCHEDULE / UNSCHEDULE messages acknowledged while no scheduler could
take them (table ``schedules``), kept in arrival order as received."""

from __future__ import annotations

import struct

from django_eventmq.router.journal.commit import JournalBase


class ScheduleStore(JournalBase):
    """The kept SCHEDULE / UNSCHEDULE messages of :class:`.store.Journal`."""

    # -- SCHEDULE / UNSCHEDULE waiting for a scheduler ---------------------------
    def add_schedule(
        self, frames: list[bytes], *, unschedule: bool, job_key: str, timing_key: str
    ) -> None:
        """Keep a SCHEDULE or UNSCHEDULE (its frames as received) for a scheduler."""
        self._write(
            "INSERT INTO schedules (unschedule, job_key, timing_key, frames) VALUES (?, ?, ?, ?)",
            (unschedule, job_key, timing_key, pack_frames(frames)),
        )

    def drop_schedules(self, job_key: str, timing_key: str) -> int:
        """An UNSCHEDULE's effect on kept SCHEDULEs: drop the job's (all timings if
        ``timing_key`` is empty). Returns how many were dropped."""
        return self._write(*_drop_statement(job_key, timing_key))

    def keep_unschedule(self, frames: list[bytes], job_key: str, timing_key: str) -> int:
        """Keep an UNSCHEDULE and drop the kept SCHEDULEs it names (:meth:`drop_schedules`)
        in the same write: neither is committed without the other (a failed write's
        replay is committed alone). Returns how many it dropped."""
        drop = (*_drop_statement(job_key, timing_key), False)
        keep = (
            "INSERT INTO schedules (unschedule, job_key, timing_key, frames) VALUES (1, ?, ?, ?)",
            (job_key, timing_key, pack_frames(frames)),
            False,
        )
        return int(self._now_all([drop, keep], changes=2)[0].rowcount)

    def schedules(self, limit: int = 1000) -> list[tuple[int, bool, list[bytes]]]:
        """The oldest ``limit`` kept messages, oldest first: ``(seq, is UNSCHEDULE, frames)``."""
        return [
            (seq, bool(unschedule), unpack_frames(packed))
            for seq, unschedule, packed in self._execute(
                "SELECT seq, unschedule, frames FROM schedules ORDER BY seq LIMIT ?", (limit,)
            )
        ]

    def delete_schedule(self, seq: int) -> None:
        self._write("DELETE FROM schedules WHERE seq = ?", (seq,))

    def schedule_count(self) -> int:
        return int(self._execute("SELECT COUNT(*) FROM schedules").fetchone()[0])


def _drop_statement(job_key: str, timing_key: str) -> tuple[str, tuple[str, ...]]:
    """The DELETE of :meth:`ScheduleStore.drop_schedules`."""
    if timing_key:
        return (
            "DELETE FROM schedules WHERE unschedule = 0 AND job_key = ? AND timing_key = ?",
            (job_key, timing_key),
        )
    return "DELETE FROM schedules WHERE unschedule = 0 AND job_key = ?", (job_key,)


def pack_frames(frames: list[bytes]) -> bytes:
    """A message's frames as one blob (each after its length, 4 bytes big-endian);
    both backends store a kept SCHEDULE this way."""
    return b"".join(struct.pack(">I", len(frame)) + frame for frame in frames)


def unpack_frames(packed: bytes) -> list[bytes]:
    """The frames :func:`pack_frames` packed."""
    frames = []
    at = 0
    while at < len(packed):
        (size,) = struct.unpack_from(">I", packed, at)
        at += 4
        frames.append(packed[at : at + size])
        at += size
    return frames
