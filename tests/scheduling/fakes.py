"""Test helpers: a raw ROUTER standing in for the router, and an in-memory schedule store."""

from __future__ import annotations

import itertools
from collections.abc import Collection, Sequence
from dataclasses import replace
from datetime import datetime

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import Ack, Heartbeat, Inform, Message, new_msgid
from django_eventmq.runtime import transport
from django_eventmq.scheduling.identity import ScheduleSpec
from django_eventmq.scheduling.scheduler import ScheduleState
from django_eventmq.scheduling.timing import DuePlan, first_run
from tests.support import wait_for


class FakeRouter:
    """A ROUTER socket bound on a random loopback port; the test plays the router."""

    def __init__(self) -> None:
        self.channel = transport.Channel(transport.ROUTER, bind="tcp://127.0.0.1:*")
        self.addr = self.channel.address
        self.received: list[tuple[bytes, Message]] = []
        self.errors: list[ProtocolError] = []
        self._acked: set[str] = set()
        self.peers: set[bytes] = set()

    def pump(self, timeout_ms: int = 0) -> int:
        """Read what is waiting; returns how many messages arrived."""
        count = 0
        while self.channel.poll(timeout_ms):
            timeout_ms = 0
            try:
                identity, _frames, message = self.channel.recv()
            except ProtocolError as exc:
                self.errors.append(exc)
                continue
            self.received.append((identity, message))
            count += 1
        return count

    def of(self, kind: type[Message]) -> list[tuple[bytes, Message]]:
        return [(i, m) for i, m in self.received if isinstance(m, kind)]

    def wait_for(self, kind: type[Message], count: int = 1, timeout: float = 5.0, tick=None):
        """Wait until ``count`` messages of ``kind`` arrived; ``tick()`` runs between polls."""

        def check() -> list[tuple[bytes, Message]] | None:
            if tick is not None:
                tick()
            self.pump(10)
            found = self.of(kind)
            return found if len(found) >= count else None

        return wait_for(check, timeout, f"{count} {kind.__name__} at the fake router")

    def ack_informs(self) -> list[bytes]:
        """ACK every INFORM seen and not yet answered (and say HEARTBEAT); returns identities."""
        done = []
        for identity, message in self.of(Inform):
            if message.msgid in self._acked:
                continue
            self._acked.add(message.msgid)
            try:
                self.channel.send_to(identity, Ack(msgid=new_msgid(), ack_msgid=message.msgid))
                self.channel.send_to(identity, Heartbeat(msgid=new_msgid(), timestamp=0.0))
            except transport.ZMQError:
                # That connection is gone: the scheduler gave up waiting for this ACK
                # (a slow start on a busy machine) and reconnects with a new INFORM.
                continue
            self.peers.add(identity)
            done.append(identity)
        return done

    def heartbeat_all(self) -> None:
        for identity in list(self.peers):
            try:
                self.channel.send_to(identity, Heartbeat(msgid=new_msgid(), timestamp=0.0))
            except transport.ZMQError:  # that peer has gone away
                self.peers.discard(identity)

    def send(self, identity: bytes, message: Message) -> None:
        self.channel.send_to(identity, message)

    def send_frames(self, identity: bytes, frames: Sequence[bytes]) -> None:
        self.channel.send_frames([identity, *frames])

    def close(self) -> None:
        self.channel.close()


class MemoryStore:
    """A ScheduleStore in a dict: the scheduler core tests run without Django."""

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
