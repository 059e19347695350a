"""Every state change of the three eMQP sessions (:mod:`.session`), one table per side.

A session names what happened (an event: a message came, the caller acts,
time passed) and :func:`step` looks up the next state in its side's table:
``TABLE[state][event] -> new state``. A pair the table lacks is refused with
:class:`ProtocolError` naming the event and the state, so each table is the
whole list of what its side may see or do in each state. An event that is
allowed but changes nothing maps a state to itself.

The sessions take a shortcut for the one event per job in the state it
mostly comes in (a REQUEST once settled, a DONE from a peer of ours): a
plain identity check stands for that self-loop, and
tests/protocol/test_session_table.py walks every pair to keep the two
in step.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import TypeVar

from django_eventmq.errors import ProtocolError

_S = TypeVar("_S", bound=Enum)
_E = TypeVar("_E", bound=Enum)


def step(
    side: str, table: Mapping[_S, Mapping[_E, _S]], state: _S, event: _E, what: str = ""
) -> _S:
    """The state after ``event`` in ``state``; refused when the table lacks the pair.

    ``what`` names the event in the error when the event's own name says too
    little (the command received, for example).
    """
    new = table[state].get(event)
    if new is None:
        raise ProtocolError(f"{side}: {what or event.value} is not allowed in state {state.name}")
    return new


# -- the job manager's side ---------------------------------------------------------


class JobManagerState(Enum):
    #: Nothing sent yet on this socket.
    IDLE = "idle"
    #: INFORM sent; waiting for its ACK.
    INFORMING = "informing"
    #: ACKed; waiting for FEATURES (until a deadline) to know how to report.
    DECIDING = "deciding"
    #: The router speaks our extensions: DONE, NACK, CANCEL, maybe PARTIAL, UNREADY.
    EXTENDED = "extended"
    #: The router is the reference: REPLY then READY, as the reference job manager does.
    REFERENCE = "reference"
    #: The conversation is over (DISCONNECT, KBAI, or the socket was dropped).
    CLOSED = "closed"


class JobManagerEvent(Enum):
    # Values name the event in a refusal.
    INFORM = "INFORM"
    #: The ACK of our INFORM (an ACK of anything else is a :attr:`MESSAGE`).
    INFORM_ACKED = "the ACK of our INFORM"
    #: The router's FEATURES, taking DONE (absent ``"done"`` means it does).
    FEATURES = "FEATURES"
    #: The router's FEATURES with ``"done": 0``: it wants REPLY and READY.
    FEATURES_WITHOUT_DONE = "FEATURES without DONE"
    #: After the ACK, something other than FEATURES came first: ours sends
    #: FEATURES right after its ACK, the reference router never does.
    NOT_FEATURES_FIRST = "a first message other than FEATURES"
    #: No FEATURES by the deadline after the ACK (:meth:`.JobManagerSession.tick`).
    DEADLINE = "the FEATURES deadline"
    REQUEST = "REQUEST"
    #: CANCEL or REJECT: only a router of ours sends them.
    ROUTER_EXTENSION = "CANCEL or REJECT"
    #: DISCONNECT or KBAI from the router.
    GOODBYE = "DISCONNECT or KBAI"
    #: Any other message (HEARTBEAT, an ACK of something else, ...).
    MESSAGE = "a message"
    #: The socket is gone.
    CLOSE = "closing"
    # What the caller does:
    DONE = "DONE"
    NACK = "NACK"
    REPLY = "REPLY"
    HOLD = "holding an outcome"
    RELEASE = "releasing held outcomes"
    SUCCESSOR = "a new conversation"


_JM = JobManagerState
_JE = JobManagerEvent

JOBMANAGER_TABLE: Mapping[JobManagerState, Mapping[JobManagerEvent, JobManagerState]] = {
    _JM.IDLE: {
        _JE.INFORM: _JM.INFORMING,
        _JE.HOLD: _JM.IDLE,
        _JE.CLOSE: _JM.CLOSED,
    },
    _JM.INFORMING: {
        _JE.INFORM_ACKED: _JM.DECIDING,
        # Before the ACK: the mode it says is taken at the ACK (the session
        # steps again with it once DECIDING).
        _JE.FEATURES: _JM.INFORMING,
        _JE.FEATURES_WITHOUT_DONE: _JM.INFORMING,
        _JE.REQUEST: _JM.INFORMING,
        _JE.MESSAGE: _JM.INFORMING,
        _JE.GOODBYE: _JM.CLOSED,
        _JE.HOLD: _JM.INFORMING,
        _JE.CLOSE: _JM.CLOSED,
    },
    _JM.DECIDING: {
        _JE.FEATURES: _JM.EXTENDED,
        _JE.FEATURES_WITHOUT_DONE: _JM.REFERENCE,
        _JE.NOT_FEATURES_FIRST: _JM.REFERENCE,
        _JE.DEADLINE: _JM.REFERENCE,
        _JE.HOLD: _JM.DECIDING,
        _JE.CLOSE: _JM.CLOSED,
    },
    # Settled. A FEATURES now is too late: we report as the mode we settled
    # on, and the router, without our answer, takes us for a job manager that
    # does not speak the extensions: both sides agree.
    _JM.EXTENDED: {
        _JE.INFORM_ACKED: _JM.EXTENDED,  # a repeated ACK changes nothing
        _JE.REQUEST: _JM.EXTENDED,
        _JE.ROUTER_EXTENSION: _JM.EXTENDED,
        _JE.MESSAGE: _JM.EXTENDED,
        _JE.GOODBYE: _JM.CLOSED,
        _JE.DONE: _JM.EXTENDED,
        _JE.NACK: _JM.EXTENDED,
        _JE.RELEASE: _JM.EXTENDED,
        _JE.CLOSE: _JM.CLOSED,
    },
    _JM.REFERENCE: {
        _JE.INFORM_ACKED: _JM.REFERENCE,
        _JE.REQUEST: _JM.REFERENCE,
        _JE.MESSAGE: _JM.REFERENCE,
        _JE.GOODBYE: _JM.CLOSED,
        _JE.REPLY: _JM.REFERENCE,
        _JE.RELEASE: _JM.REFERENCE,
        _JE.CLOSE: _JM.CLOSED,
    },
    _JM.CLOSED: {
        _JE.HOLD: _JM.CLOSED,
        _JE.SUCCESSOR: _JM.CLOSED,
        _JE.CLOSE: _JM.CLOSED,
    },
}


# -- the router's side ----------------------------------------------------------------


class PeerState(Enum):
    #: Nothing heard from the peer yet.
    NEW = "new"
    #: INFORM answered with ACK and our FEATURES; the peer has not shown it speaks them.
    INFORMED = "informed"
    #: The peer speaks our extensions (it sent FEATURES, DONE, NACK or UNREADY).
    EXTENDED = "extended"
    #: The peer is shutting down (NACK "stopping"): no more jobs for it, the
    #: slots it announced or frees are void; it keeps and reports its jobs.
    STOPPING = "stopping"
    #: The peer said goodbye (KBAI), or was dropped.
    GONE = "gone"


class PeerEvent(Enum):
    INFORM = "INFORM"
    FEATURES = "FEATURES"
    #: READY, or a job that could not be sent to the peer: a slot is free.
    SLOT_FREED = "a freed slot (READY)"
    #: DONE or NACK: the peer reports each job, so it speaks our extensions.
    REPORTED = "DONE or NACK"
    UNREADY = "UNREADY"
    #: The router hands a job to the peer.
    HAND_OUT = "handing out a job"
    #: The peer said it is shutting down (NACK "stopping").
    STOP = "stopping"
    GOODBYE = "KBAI"
    #: Any other message (HEARTBEAT, REPLY, RUNNING, ...).
    MESSAGE = "a message"


_P = PeerState
_PE = PeerEvent

PEER_TABLE: Mapping[PeerState, Mapping[PeerEvent, PeerState]] = {
    # The reference router drops what an unknown worker sends; so do we.
    _P.NEW: {_PE.INFORM: _P.INFORMED},
    _P.INFORMED: {
        _PE.FEATURES: _P.EXTENDED,
        _PE.SLOT_FREED: _P.INFORMED,
        _PE.REPORTED: _P.EXTENDED,
        _PE.UNREADY: _P.EXTENDED,
        _PE.HAND_OUT: _P.INFORMED,
        _PE.STOP: _P.STOPPING,
        _PE.GOODBYE: _P.GONE,
        _PE.MESSAGE: _P.INFORMED,
    },
    _P.EXTENDED: {
        _PE.FEATURES: _P.EXTENDED,  # a restatement (its trouble, for one)
        _PE.SLOT_FREED: _P.EXTENDED,
        _PE.REPORTED: _P.EXTENDED,
        _PE.UNREADY: _P.EXTENDED,
        _PE.HAND_OUT: _P.EXTENDED,
        _PE.STOP: _P.STOPPING,
        _PE.GOODBYE: _P.GONE,
        _PE.MESSAGE: _P.EXTENDED,
    },
    _P.STOPPING: {
        _PE.FEATURES: _P.STOPPING,
        _PE.SLOT_FREED: _P.STOPPING,  # not counted
        _PE.REPORTED: _P.STOPPING,  # its slot is not counted
        _PE.UNREADY: _P.STOPPING,  # nothing to take back
        _PE.STOP: _P.STOPPING,
        _PE.GOODBYE: _P.GONE,
        _PE.MESSAGE: _P.STOPPING,
    },
    _P.GONE: {},
}


# -- the client's side ----------------------------------------------------------------


class ClientState(Enum):
    #: Our FEATURES not sent yet.
    IDLE = "idle"
    #: FEATURES sent; a router of ours answers it before anything else.
    ASKING = "asking"
    #: The router answered: it is ours, and its FEATURES say what we may send.
    ANSWERED = "answered"
    #: Something else came first, or the deadline passed: the reference router.
    REFERENCE = "reference"


class ClientEvent(Enum):
    #: Our FEATURES (first on a new socket, or again to re-check the router).
    ASK = "FEATURES"
    #: Our FEATURES again to a router that answered (its next answer says it
    #: read all we sent before).
    PROBE = "FEATURES to a router that did not answer"
    #: The router's FEATURES (an answer to ours, or to a bulk sender's on the socket).
    ANSWER = "receiving FEATURES"
    #: Anything else from the router.
    HEARD = "receiving a message"
    #: No answer by the deadline.
    DEADLINE = "the FEATURES deadline"


_C = ClientState
_CE = ClientEvent

CLIENT_TABLE: Mapping[ClientState, Mapping[ClientEvent, ClientState]] = {
    _C.IDLE: {_CE.ASK: _C.ASKING},
    _C.ASKING: {
        _CE.ASK: _C.ASKING,
        _CE.ANSWER: _C.ANSWERED,
        _CE.HEARD: _C.REFERENCE,
        _CE.DEADLINE: _C.REFERENCE,
    },
    _C.ANSWERED: {
        _CE.ASK: _C.ASKING,
        _CE.PROBE: _C.ANSWERED,
        _CE.ANSWER: _C.ANSWERED,
        _CE.HEARD: _C.ANSWERED,
    },
    _C.REFERENCE: {
        _CE.ASK: _C.ASKING,
        _CE.ANSWER: _C.ANSWERED,  # a bulk sender's answer on the same socket
        _CE.HEARD: _C.REFERENCE,
    },
}
