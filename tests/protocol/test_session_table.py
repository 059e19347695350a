"""The sessions' transition tables (protocol/transitions.py), walked pair by pair.

Two walks. The table alone: every (state, event) pair of a side either gives
the table's new state or is refused with a ProtocolError that names both.
The sessions: each session is built in each state by its own methods, then
every action it takes (a message received, a call by its process, time
passing) is tried on it while the steps it asks of the table are recorded.
The session's state must change only through those steps, a shortcut that
asks nothing (the per-job calls) must stand for a self-loop of the table, a
refusal leaves the last state, and every pair the table allows is reached by
some action.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

import pytest

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import (
    Ack,
    Cancel,
    Disconnect,
    Done,
    Features,
    Headers,
    Heartbeat,
    Inform,
    Kbai,
    Nack,
    Ready,
    Reject,
    Request,
    Unready,
    client_session,
    new_msgid,
    session,
    transitions,
)
from django_eventmq.protocol.client_session import ClientSession
from django_eventmq.protocol.features import JOBMANAGER_FEATURES, ROUTER_FEATURES
from django_eventmq.protocol.session import JobManagerSession, RouterPeerSession
from django_eventmq.protocol.transitions import (
    CLIENT_TABLE,
    JOBMANAGER_TABLE,
    PEER_TABLE,
    ClientEvent,
    ClientState,
    JobManagerEvent,
    JobManagerState,
    PeerEvent,
    PeerState,
    step,
)

QUEUES = ((10, "default"),)
JM, JE = JobManagerState, JobManagerEvent
P, PE = PeerState, PeerEvent
CS, CE = ClientState, ClientEvent

TABLES: list[tuple[str, Mapping[Any, Mapping[Any, Any]], type[Enum], type[Enum]]] = [
    ("job manager", JOBMANAGER_TABLE, JobManagerState, JobManagerEvent),
    ("router", PEER_TABLE, PeerState, PeerEvent),
    ("client", CLIENT_TABLE, ClientState, ClientEvent),
]


# -- the tables alone ------------------------------------------------------------------


@pytest.mark.parametrize(("side", "table", "states", "events"), TABLES)
def test_every_pair_transitions_as_the_table_says_or_is_refused(
    side: str, table: Mapping[Any, Mapping[Any, Any]], states: type[Enum], events: type[Enum]
) -> None:
    assert set(table) == set(states)  # every state has its row, an empty one for none
    for state in states:
        for event in events:
            new = table[state].get(event)
            if new is not None:
                assert step(side, table, state, event) is new
                continue
            with pytest.raises(ProtocolError) as refused:
                step(side, table, state, event)
            assert refused.value.reason == (
                f"{side}: {event.value} is not allowed in state {state.name}"
            )


def test_a_refusal_names_what_the_caller_says_happened() -> None:
    with pytest.raises(
        ProtocolError, match=r"^job manager: receiving PING is not allowed in state IDLE$"
    ):
        step("job manager", JOBMANAGER_TABLE, JM.IDLE, JE.MESSAGE, "receiving PING")


# -- the sessions follow the tables ----------------------------------------------------


@dataclass
class Step:
    state: Enum
    event: Enum
    refused: bool


@contextlib.contextmanager
def recording(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Step]]:
    """Every step the sessions ask of their table while the block runs."""
    steps: list[Step] = []

    def recorded(side: str, table: Any, state: Any, event: Any, what: str = "") -> Any:
        try:
            new = transitions.step(side, table, state, event, what)
        except ProtocolError:
            steps.append(Step(state, event, refused=True))
            raise
        steps.append(Step(state, event, refused=False))
        return new

    with monkeypatch.context() as patch:
        patch.setattr(session, "step", recorded)
        patch.setattr(client_session, "step", recorded)
        yield steps


@dataclass
class Action:
    name: str
    #: The event it stands for when it asks nothing of the table (a shortcut).
    event: Enum
    run: Callable[[Any], object]
    #: It may do nothing at all (time passing before a deadline).
    may_do_nothing: bool = False
    #: Done on the session before recording (what the action needs to be possible).
    prepare: Callable[[Any], object] | None = None


def walk(
    table: Mapping[Any, Mapping[Any, Any]],
    build: Mapping[Enum, Callable[[], Any]],
    actions: list[Action],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reached: set[tuple[Enum, Enum]] = set()
    for start, make in build.items():
        for action in actions:
            subject = make()
            assert subject.state is start, f"built {subject.state} for {start}"
            if action.prepare is not None:
                with contextlib.suppress(ProtocolError):
                    action.prepare(subject)
            where = f"{action.name} in {start.name}"
            with recording(monkeypatch) as steps:
                try:
                    action.run(subject)
                    raised: ProtocolError | None = None
                except ProtocolError as exc:
                    raised = exc
            state = start
            for index, taken in enumerate(steps):
                assert taken.state is state, f"{where}: the state changed outside the table"
                if taken.refused:
                    assert index == len(steps) - 1 and raised is not None, where
                    assert state.name in raised.reason, where
                    break
                state = table[state][taken.event]
                reached.add((taken.state, taken.event))
            assert subject.state is state, f"{where}: ends {subject.state}, the table says {state}"
            if steps:
                assert raised is None or steps[-1].refused, f"{where}: {raised}"
                continue
            assert raised is None, f"{where}: refused without the table: {raised}"
            if action.may_do_nothing:
                continue
            # A shortcut: it stands for the table's self-loop.
            assert table[start].get(action.event) is start, f"{where}: a shortcut, no self-loop"
            reached.add((start, action.event))
    allowed = {(state, event) for state, row in table.items() for event in row}
    assert allowed - reached == set(), "pairs of the table no action reaches"


def request() -> Request:
    return Request(msgid=new_msgid(), queue="default", headers=Headers(), body_text="{}")


def heartbeat() -> Heartbeat:
    return Heartbeat(msgid=new_msgid(), timestamp=1.0)


def features(said: Mapping[str, Any]) -> Features:
    return Features(msgid=new_msgid(), features=dict(said))


# -- the job manager's side -------------------------------------------------------------


def jm_idle() -> JobManagerSession[str]:
    return JobManagerSession()


def jm_informing() -> JobManagerSession[str]:
    jm = jm_idle()
    jm.inform(QUEUES)
    return jm


def jm_deciding() -> JobManagerSession[str]:
    jm = jm_informing()
    jm.receive(Ack(msgid=new_msgid(), ack_msgid=jm._inform_msgid), 0.0)
    return jm


def jm_extended() -> JobManagerSession[str]:
    jm = jm_deciding()
    jm.receive(features(ROUTER_FEATURES), 0.0)
    return jm


def jm_reference() -> JobManagerSession[str]:
    jm = jm_deciding()
    jm.receive(heartbeat(), 0.0)
    return jm


def jm_closed() -> JobManagerSession[str]:
    jm = jm_idle()
    jm.close()
    return jm


JM_ACTIONS = [
    Action("INFORM", JE.INFORM, lambda s: s.inform(QUEUES)),
    Action(
        "the ACK of our INFORM",
        JE.INFORM_ACKED,
        lambda s: s.receive(Ack(msgid=new_msgid(), ack_msgid=s._inform_msgid or "x"), 0.0),
    ),
    Action("another ACK", JE.MESSAGE, lambda s: s.receive(Ack(msgid="a", ack_msgid="x"), 0.0)),
    Action("FEATURES", JE.FEATURES, lambda s: s.receive(features(ROUTER_FEATURES), 0.0)),
    Action(
        "FEATURES without DONE",
        JE.FEATURES_WITHOUT_DONE,
        lambda s: s.receive(features({"done": 0}), 0.0),
    ),
    Action("HEARTBEAT", JE.MESSAGE, lambda s: s.receive(heartbeat(), 0.0)),
    Action("REQUEST", JE.REQUEST, lambda s: s.receive(request(), 0.0)),
    Action(
        "CANCEL",
        JE.ROUTER_EXTENSION,
        lambda s: s.receive(Cancel(msgid=new_msgid(), job_msgid="j"), 0.0),
    ),
    Action(
        "REJECT",
        JE.ROUTER_EXTENSION,
        lambda s: s.receive(Reject(msgid=new_msgid(), job_msgid="j", reason="r"), 0.0),
    ),
    Action("DISCONNECT", JE.GOODBYE, lambda s: s.receive(Disconnect(msgid=new_msgid()), 0.0)),
    Action("KBAI", JE.GOODBYE, lambda s: s.receive(Kbai(msgid=new_msgid()), 0.0)),
    Action("the deadline", JE.DEADLINE, lambda s: s.tick(1e9), may_do_nothing=True),
    Action("close", JE.CLOSE, lambda s: s.close()),
    Action("DONE", JE.DONE, lambda s: s.done("j", "ok", "")),
    Action("NACK", JE.NACK, lambda s: s.nack("j", "stopping")),
    Action("REPLY", JE.REPLY, lambda s: s.reply("j", "")),
    Action("hold", JE.HOLD, lambda s: s.hold("outcome")),
    Action("take_held", JE.RELEASE, lambda s: s.take_held()),
    Action("successor", JE.SUCCESSOR, lambda s: s.successor()),
]


def test_the_job_manager_session_follows_its_table(monkeypatch: pytest.MonkeyPatch) -> None:
    build = {
        JM.IDLE: jm_idle,
        JM.INFORMING: jm_informing,
        JM.DECIDING: jm_deciding,
        JM.EXTENDED: jm_extended,
        JM.REFERENCE: jm_reference,
        JM.CLOSED: jm_closed,
    }
    walk(JOBMANAGER_TABLE, build, JM_ACTIONS, monkeypatch)


# -- the router's side -----------------------------------------------------------------------


def peer_new() -> RouterPeerSession:
    return RouterPeerSession()


def peer_informed() -> RouterPeerSession:
    peer = peer_new()
    peer.receive(Inform(msgid=new_msgid(), queues=QUEUES))
    return peer


def peer_extended() -> RouterPeerSession:
    peer = peer_informed()
    peer.receive(features(JOBMANAGER_FEATURES))
    return peer


def peer_stopping() -> RouterPeerSession:
    peer = peer_extended()
    peer.stop()
    return peer


def peer_gone() -> RouterPeerSession:
    peer = peer_informed()
    peer.receive(Kbai(msgid=new_msgid()))
    return peer


def _free(peer: RouterPeerSession) -> None:
    peer.free_slot()


PEER_ACTIONS = [
    Action("INFORM", PE.INFORM, lambda s: s.receive(Inform(msgid=new_msgid(), queues=QUEUES))),
    Action("FEATURES", PE.FEATURES, lambda s: s.receive(features(JOBMANAGER_FEATURES))),
    Action("READY", PE.SLOT_FREED, lambda s: s.receive(Ready(msgid=new_msgid()))),
    Action("free_slot", PE.SLOT_FREED, lambda s: s.free_slot()),
    Action(
        "DONE",
        PE.REPORTED,
        lambda s: s.receive(Done(msgid=new_msgid(), job_msgid="j", status="ok")),
    ),
    Action("NACK", PE.REPORTED, lambda s: s.receive(Nack(msgid=new_msgid(), job_msgid="j"))),
    Action("job_reported", PE.REPORTED, lambda s: s.job_reported()),
    Action("reported", PE.REPORTED, lambda s: s.reported()),
    Action("UNREADY", PE.UNREADY, lambda s: s.receive(Unready(msgid=new_msgid(), count=1))),
    Action("take_back", PE.UNREADY, lambda s: s.take_back(1)),
    Action("hand_out", PE.HAND_OUT, lambda s: s.hand_out(), prepare=_free),
    Action("dispatch", PE.HAND_OUT, lambda s: s.dispatch(request()), prepare=_free),
    Action("stop", PE.STOP, lambda s: s.stop()),
    Action("KBAI", PE.GOODBYE, lambda s: s.receive(Kbai(msgid=new_msgid()))),
    Action("HEARTBEAT", PE.MESSAGE, lambda s: s.receive(heartbeat())),
]


def test_the_router_peer_session_follows_its_table(monkeypatch: pytest.MonkeyPatch) -> None:
    build = {
        P.NEW: peer_new,
        P.INFORMED: peer_informed,
        P.EXTENDED: peer_extended,
        P.STOPPING: peer_stopping,
        P.GONE: peer_gone,
    }
    walk(PEER_TABLE, build, PEER_ACTIONS, monkeypatch)


def test_a_peer_that_stops_or_leaves_has_no_free_slot() -> None:
    """Credit only in INFORMED or EXTENDED: the one check per job in hand_out relies on it."""
    for make in (peer_stopping, peer_gone):
        peer = peer_extended()
        peer.free_slot()
        peer.free_slot()
        peer.stop() if make is peer_stopping else peer.receive(Kbai(msgid=new_msgid()))
        assert peer.credit == 0
        with contextlib.suppress(ProtocolError):
            peer.free_slot()
        assert peer.credit == 0
        with pytest.raises(ProtocolError, match=peer.state.name):
            peer.hand_out()


def test_registered_is_an_inform_without_answers() -> None:
    peer = RouterPeerSession.registered(QUEUES)
    assert (peer.state, peer.queues, peer.credit) == (P.INFORMED, QUEUES, 0)


# -- the client's side -----------------------------------------------------------------------


def client_idle() -> ClientSession:
    return ClientSession({"batch": 1})


def client_asking() -> ClientSession:
    client = client_idle()
    client.ask(0.0, wait=1.0)
    return client


def client_answered() -> ClientSession:
    client = client_asking()
    client.answered({})
    return client


def client_reference() -> ClientSession:
    client = client_asking()
    client.heard()
    return client


CLIENT_ACTIONS = [
    Action("ask", CE.ASK, lambda s: s.ask(0.0, wait=1.0)),
    Action("probe", CE.PROBE, lambda s: s.probe()),
    Action("FEATURES", CE.ANSWER, lambda s: s.receive(features({}))),
    Action("answered", CE.ANSWER, lambda s: s.answered({})),
    Action("ACK", CE.HEARD, lambda s: s.receive(Ack(msgid="a", ack_msgid="x"))),
    Action("heard", CE.HEARD, lambda s: s.heard()),
    Action("the deadline", CE.DEADLINE, lambda s: s.tick(1e9), may_do_nothing=True),
]


def test_the_client_session_follows_its_table(monkeypatch: pytest.MonkeyPatch) -> None:
    build = {
        CS.IDLE: client_idle,
        CS.ASKING: client_asking,
        CS.ANSWERED: client_answered,
        CS.REFERENCE: client_reference,
    }
    walk(CLIENT_TABLE, build, CLIENT_ACTIONS, monkeypatch)
