"""Test helpers: an in-memory schedule store (the fake router is tests/fake_router.py)."""

from __future__ import annotations

import itertools
from collections.abc import Collection, Sequence
from dataclasses import replace
from datetime import datetime

from django_eventmq.scheduling.identity import ScheduleSpec
from django_eventmq.scheduling.scheduler import ScheduleState
from django_eventmq.scheduling.timing import DuePlan, first_run


class MemoryStore:
    """A ScheduleDatabase in a dict: the scheduler core tests run without Django."""

    def __init__(self) -> None:
        self.rows: dict[int, ScheduleState] = {}
        self.keys: dict[str, int] = {}
        self.job_keys: dict[int, str] = {}
        self.claims: dict[tuple[int, datetime], str] = {}
        self.results: dict[str, str] = {}
        self.fired: list[tuple[int, datetime, str]] = []
        self._ids = itertools.count(1)

    def add(self, spec: ScheduleSpec, now: datetime) -> ScheduleState:
        assert spec.timing is not None
        sid = next(self._ids)
        state = ScheduleState(
            id=sid,
            queue=spec.queue,
            headers=spec.headers,
            body_text=spec.body.encode(),
            timing=spec.timing,
            next_run=first_run(spec.timing, now, nohaste=spec.nohaste),
            runs_left=spec.run_count,
            revision=1,
            name=spec.body.name,
        )
        self.rows[sid] = state
        self.keys[spec.key] = sid
        self.job_keys[sid] = spec.job_key
        return state

    def edit(self, sid: int, **changes: object) -> None:
        row = self.rows[sid]
        self.rows[sid] = replace(row, revision=row.revision + 1, **changes)  # type: ignore[arg-type]

    def versions(self) -> dict[int, int]:
        return {sid: s.revision for sid, s in self.rows.items() if s.next_run is not None}

    def load(self, ids: Collection[int]) -> list[ScheduleState]:
        return [self.rows[i] for i in ids if i in self.rows]

    def upsert(self, spec: ScheduleSpec, now: datetime) -> ScheduleState | None:
        sid = self.keys.get(spec.key)
        if sid is None:
            return self.add(spec, now)
        self.edit(sid, queue=spec.queue, headers=spec.headers)
        return self.rows[sid]

    def remove(self, spec: ScheduleSpec) -> int:
        gone = [
            sid
            for sid in self.rows
            if self.job_keys[sid] == spec.job_key
            and (spec.timing is None or self.keys.get(spec.key) == sid)
        ]
        for sid in gone:
            del self.rows[sid]
        self.keys = {k: v for k, v in self.keys.items() if v not in gone}
        return len(gone)

    def claim(self, schedule_id: int, fire_time: datetime, msgid: str, claimed_by: str) -> bool:
        if (schedule_id, fire_time) in self.claims:
            return False
        self.claims[(schedule_id, fire_time)] = msgid
        return True

    def record_fire(
        self, state: ScheduleState, fired: Sequence[tuple[datetime, str]], plan: DuePlan, now
    ) -> None:
        for fire_time, msgid in fired:
            self.fired.append((state.id, fire_time, msgid))
        if state.id in self.rows:
            self.edit(state.id, next_run=plan.next_run, runs_left=plan.runs_left)

    def record_result(self, msgid: str, payload: str) -> None:
        self.results[msgid] = payload

    def prune(self, before: datetime) -> int:
        return 0

    def expire_results(self, before: datetime, batch: int) -> int:
        return 0
