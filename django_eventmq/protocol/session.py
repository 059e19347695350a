"""One peer's eMQP conversation as a sans-IO state machine (no sockets, no clock).

Messages go in (:meth:`receive`), the messages to send come out; the time is
passed in as a float and never read here. Three sides:

- :class:`JobManagerSession`: a job manager's view of its router on one
  socket: INFORM -> ACK, then the FEATURES exchange. A router of ours sends
  FEATURES right after its ACK; the reference router never does, so the
  session settles on :attr:`JobManagerState.REFERENCE` when anything else
  comes first or a deadline passes. It also counts the credit (free slots the
  router holds for us) and says when READY or UNREADY is due.
- :class:`RouterPeerSession`: a router's view of one job manager: its INFORM
  (answered with ACK and our FEATURES), the features it announced, and its
  credit (READY, DONE and NACK give a slot, a job handed out takes one,
  UNREADY takes some back, owed when none is free).
- :class:`ClientSession`: a client's FEATURES handshake with a router's
  frontend (no INFORM there): ours answers, the reference never does.

A method called in a state where its event cannot happen raises
:class:`ProtocolError` naming the state.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import constants as C
from django_eventmq.protocol.bundle import BUNDLE
from django_eventmq.protocol.extensions import (
    Cancel,
    Done,
    Features,
    Nack,
    Partial,
    Reject,
    Running,
    Unready,
)
from django_eventmq.protocol.ids import new_msgid
from django_eventmq.protocol.limits import MAX_MESSAGE_BYTES
from django_eventmq.protocol.messages import (
    Ack,
    Disconnect,
    Inform,
    Kbai,
    Message,
    QueueSpec,
    Ready,
    Reply,
    Request,
)
from django_eventmq.protocol.packed import PACKED

#: What a router of ours tells a job manager it speaks, right after the ACK of its INFORM.
#: ``"bundle"``'s value is the most bytes of one frame the announcer takes (its
#: ``MAX_MESSAGE_BYTES``: ZeroMQ drops a peer that sends more); a router or job
#: manager announces its own setting (:func:`with_bundle_bytes`).
ROUTER_FEATURES: Mapping[str, int] = MappingProxyType(
    {BUNDLE: MAX_MESSAGE_BYTES}
    | dict.fromkeys(
        (
            "cancel",
            "delay",
            "done",
            "nack",
            PACKED,
            "partial",
            "priority",
            "queued",
            "reject",
            "running",
            "unready",
        ),
        1,
    )
)
#: The key of a job manager's FEATURES answer that lists the msgids of the jobs it
#: holds (still running, or not reported yet): after a failover or a reconnect its
#: new router keeps them in flight on it instead of handing them out again.
HOLDING = "holding"
#: The key of a job manager's FEATURES that says why it takes no jobs now (none of
#: its worker processes can start): sent again, without it, once it can. A router
#: shows it (STATUS); it is no negotiation, so a FEATURES may restate it any time.
TROUBLE = "trouble"
#: What a job manager of ours answers to its router's FEATURES.
#: ``"poisoned"``: the job manager records a job the router sets aside after the death
#: it reported (REJECT to it, see :meth:`RouterPeerSession.poisoned`).
JOBMANAGER_FEATURES: Mapping[str, int] = MappingProxyType(
    dict.fromkeys(
        (
            "done",
            "nack",
            "cancel",
            "timeout",
            "retry",
            "partial",
            "unready",
            "poisoned",
            "running",
            PACKED,
        ),
        1,
    )
    | {BUNDLE: MAX_MESSAGE_BYTES}
)


def with_bundle_bytes(features: Mapping[str, Any], max_bytes: int) -> dict[str, Any]:
    """``features`` announcing bundles of at most ``max_bytes`` (the announcer's
    ``MAX_MESSAGE_BYTES``), if they announce bundles at all."""
    result = dict(features)
    if BUNDLE in result:
        result[BUNDLE] = max_bytes
    return result


def bundle_bytes(value: object) -> int:
    """The most bytes of one bundle to a peer whose FEATURES gave ``value`` for
    ``"bundle"``: a whole number >= 1 is its limit (at most MAX_MESSAGE_BYTES);
    anything else (absent, false, not a number): 0, it gets no bundle."""
    if type(value) is not int or value < 1:
        return 0
    return min(value, MAX_MESSAGE_BYTES)


#: Seconds after the ACK a job manager waits for FEATURES before taking its
#: router for the reference (ours sends it right after the ACK).
FEATURES_WAIT = 0.5

_T = TypeVar("_T")


def _illegal(side: str, event: str, state: Enum) -> ProtocolError:
    return ProtocolError(f"{side}: {event} is not allowed in state {state.name}")


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


_JM = JobManagerState
_SETTLED = frozenset({_JM.EXTENDED, _JM.REFERENCE})


class JobManagerSession(Generic[_T]):
    """A job manager's conversation with its router on one socket.

    ``_T`` is what the caller keeps for an outcome that arrives before the
    mode is settled (:meth:`hold`); :meth:`take_held` gives them back once it is.
    """

    def __init__(
        self,
        *,
        features: Mapping[str, Any] = JOBMANAGER_FEATURES,
        features_wait: float = FEATURES_WAIT,
    ) -> None:
        self.state = _JM.IDLE
        self.our_features = dict(features)
        self.features_wait = features_wait
        #: What the router's FEATURES said (empty until it sends one).
        self.router_features: dict[str, Any] = {}
        #: Free slots the router holds for us; below 0 after an UNREADY it still owes.
        self.credit = 0
        #: Send packed messages: the router said it reads them, and our answer went.
        self.send_packed = False
        #: Send what one turn produces as one bundle (:mod:`.bundle`): the router
        #: said it reads them, and our answer went.
        self.send_bundle = False
        #: The most bytes of one bundle the router takes (its FEATURES said).
        self.bundle_bytes = 0
        self._inform_msgid = ""
        self._decide_by = 0.0
        #: A FEATURES came before the ACK of our INFORM: the mode it says, set at the ACK.
        self._early: bool | None = None
        self._held: list[_T] = []

    # -- what the caller asks -------------------------------------------------------
    @property
    def connected(self) -> bool:
        """Our INFORM was ACKed (and the conversation is not over)."""
        return self.state in (_JM.DECIDING, _JM.EXTENDED, _JM.REFERENCE)

    @property
    def settled(self) -> bool:
        """We know how to report outcomes (EXTENDED or REFERENCE)."""
        return self.state in _SETTLED

    @property
    def extended(self) -> bool:
        return self.state is _JM.EXTENDED

    def router_speaks(self, key: str) -> bool:
        """The router speaks extension ``key`` (its FEATURES said so, and we report with DONE)."""
        return self.extended and bool(self.router_features.get(key))

    @property
    def held(self) -> int:
        """Outcomes waiting for the mode to settle (their slots are not offered)."""
        return len(self._held)

    # -- events from the caller -----------------------------------------------------
    def inform(self, queues: QueueSpec) -> Inform:
        """The INFORM that opens the conversation."""
        if self.state is not _JM.IDLE:
            raise _illegal("job manager", "INFORM", self.state)
        message = Inform(msgid=new_msgid(), queues=queues, peer_type=C.PEER_WORKER)
        self._inform_msgid = message.msgid
        self.state = _JM.INFORMING
        return message

    def receive(self, message: Message, now: float) -> list[Message]:
        """A message from the router; returns what to send back (our FEATURES answer).

        Raises :class:`ProtocolError` for a message the router may not send now
        (the caller logs and drops it).
        """
        state = self.state
        if type(message) is Request and (state is _JM.EXTENDED or state is _JM.REFERENCE):
            self._on_request()  # the per-job case, settled: nothing else to decide
            return []
        if state is _JM.IDLE or state is _JM.CLOSED:
            raise _illegal("job manager", f"receiving {message.command}", state)
        if isinstance(message, Features):
            return self._on_features(message)
        if state is _JM.DECIDING:
            # Ours sends FEATURES right after the ACK: anything else first
            # means a router that does not speak our extensions.
            self.state = _JM.REFERENCE
        if isinstance(message, Ack):
            self._on_ack(message, now)
        elif isinstance(message, Request):
            self._on_request()
        elif isinstance(message, (Cancel, Reject)) and not self.extended:
            raise _illegal("job manager", message.command, self.state)
        elif isinstance(message, (Disconnect, Kbai)):
            self.close()
        return []

    def tick(self, now: float) -> None:
        """Time passed: settle on REFERENCE once the FEATURES deadline is over."""
        if self.state is _JM.DECIDING and now >= self._decide_by:
            self.state = _JM.REFERENCE

    def close(self) -> None:
        """The socket is gone; a new one starts a new session."""
        self.state = _JM.CLOSED
        self.send_packed = False
        self.send_bundle = False

    def successor(self) -> JobManagerSession[_T]:
        """A fresh session for a new socket, taking over the outcomes still held."""
        if self.state is not _JM.CLOSED:
            raise _illegal("job manager", "a new conversation", self.state)
        fresh: JobManagerSession[_T] = JobManagerSession(
            features=self.our_features, features_wait=self.features_wait
        )
        fresh._held = self._held
        self._held = []
        return fresh

    def hold(self, item: _T) -> None:
        """Keep an outcome until the mode is settled."""
        if self.settled:
            raise _illegal("job manager", "holding an outcome", self.state)
        self._held.append(item)

    def peek_held(self) -> list[_T]:
        """The held outcomes, left held (a new connection names their jobs)."""
        return list(self._held)

    def take_held(self) -> list[_T]:
        """The held outcomes, once the mode is settled (then report each)."""
        if not self.settled:
            raise _illegal("job manager", "releasing held outcomes", self.state)
        held, self._held = self._held, []
        return held

    def done(self, job_msgid: str, status: str, payload: str) -> Done:
        """DONE for a finished job; it frees the slot at the router."""
        self._require_extended("DONE")
        self.credit += 1
        return Done(msgid=new_msgid(), job_msgid=job_msgid, status=status, payload=payload)

    def restate(self, key: str, value: object) -> Features | None:
        """Our FEATURES again with ``key`` set to ``value`` (removed when falsy), for
        a router of ours (None otherwise; the change is kept for the next connection).
        Without ``holding``: that was said once, at the connection."""
        features = {k: v for k, v in self.our_features.items() if k != key}
        if value:
            features[key] = value
        self.our_features = features
        if not self.extended:
            return None
        told = {k: v for k, v in features.items() if k != HOLDING}
        return Features(msgid=new_msgid(), features=told)

    def nack(self, job_msgid: str, reason: str) -> Nack:
        """NACK: a job handed back unrun; it frees the slot at the router."""
        self._require_extended("NACK")
        self.credit += 1
        return Nack(msgid=new_msgid(), job_msgid=job_msgid, reason=reason)

    def reply(self, job_msgid: str, payload: str) -> Reply:
        """REPLY for a finished job (reference mode; the slot is freed by READY)."""
        if self.state is not _JM.REFERENCE:
            raise _illegal("job manager", "REPLY", self.state)
        return Reply(msgid=new_msgid(), payload=payload, reply_to=job_msgid)

    def partial(self, job_msgid: str, payload: str) -> Partial | None:
        """PARTIAL for a router that speaks it; None otherwise (partials are best effort)."""
        if not self.router_speaks("partial"):
            return None
        return Partial(msgid=new_msgid(), job_msgid=job_msgid, payload=payload)

    def running(self, jobs: dict[str, tuple[int, float]]) -> Running | None:
        """RUNNING for a router that speaks it; None otherwise (a reference router
        shows the jobs it handed out, without their worker processes)."""
        if not self.router_speaks("running"):
            return None
        return Running(msgid=new_msgid(), jobs=jobs)

    def top_up(self, free: int, *, slack: int = 0) -> list[Message]:
        """READY until the router holds ``free`` slots; UNREADY when it holds more
        than ``slack`` too many and speaks UNREADY.

        Nothing before the mode is settled: our FEATURES answer must reach our
        router before any READY. ``free`` does not count held outcomes' slots.
        """
        if not self.settled:
            return []
        free -= len(self._held)
        out: list[Message] = []
        while self.credit < free:
            out.append(Ready(msgid=new_msgid()))
            self.credit += 1
        excess = self.credit - free
        if excess > slack and self.router_speaks("unready"):
            # Below 0 when we hold more jobs than we want: the router then keeps
            # the slots the next DONEs free instead of sending more.
            out.append(Unready(msgid=new_msgid(), count=excess))
            self.credit = free
        return out

    # -- transitions ------------------------------------------------------------------
    def _require_extended(self, command: str) -> None:
        if self.state is not _JM.EXTENDED:
            raise _illegal("job manager", command, self.state)

    def _on_ack(self, message: Ack, now: float) -> None:
        if message.ack_msgid != self._inform_msgid or self.state is not _JM.INFORMING:
            return  # an ACK of something else: nothing to do with the conversation
        self._decide_by = now + self.features_wait
        self.state = _JM.DECIDING
        if self._early is not None:
            self.state = _JM.EXTENDED if self._early else _JM.REFERENCE

    def _on_request(self) -> None:
        # Below 0 only after UNREADY: slots the router owes us back.
        if self.credit > 0 or self.router_speaks("unready"):
            self.credit -= 1

    def _on_features(self, message: Features) -> list[Message]:
        if self.state is _JM.REFERENCE or self.state is _JM.EXTENDED:
            # Too late: we report as the mode we settled on, and the router,
            # without our answer, takes us for a job manager that does not
            # speak the extensions: both sides agree.
            raise _illegal("job manager", "FEATURES", self.state)
        self.router_features = dict(message.features)
        speaks_done = bool(message.features.get("done", 1))
        if self.state is _JM.DECIDING:
            self.state = _JM.EXTENDED if speaks_done else _JM.REFERENCE
        else:  # INFORMING: settled when the ACK comes
            self._early = speaks_done
        answer = Features(msgid=new_msgid(), features=self.our_features)
        # After our answer: what we send from now on may go packed.
        self.send_packed = bool(message.features.get(PACKED))
        self.bundle_bytes = bundle_bytes(message.features.get(BUNDLE))
        self.send_bundle = self.bundle_bytes > 0
        return [answer]


# -- the router's side ----------------------------------------------------------------


class PeerState(Enum):
    #: Nothing heard from the peer yet.
    NEW = "new"
    #: INFORM answered with ACK and our FEATURES; the peer has not shown it speaks them.
    INFORMED = "informed"
    #: The peer speaks our extensions (it sent FEATURES, DONE, NACK or UNREADY).
    EXTENDED = "extended"
    #: The peer said goodbye (KBAI), or was dropped.
    GONE = "gone"


_P = PeerState


class RouterPeerSession:
    """A router's conversation with one job manager on its backend.

    ``features`` is what the router announces after the ACK (all of
    :data:`ROUTER_FEATURES` by default).
    """

    # Slots: the router reads and counts credit for every job.
    __slots__ = (
        "announced",
        "bundle",
        "bundle_bytes",
        "credit",
        "debt",
        "our_features",
        "packed",
        "queues",
        "state",
    )

    def __init__(self, *, features: Mapping[str, Any] = ROUTER_FEATURES) -> None:
        self.state = _P.NEW
        self.our_features = dict(features)
        #: What the peer's FEATURES said (empty until it sends one).
        self.announced: dict[str, Any] = {}
        self.queues: QueueSpec = ()
        #: Free slots it announced and we have not used.
        self.credit = 0
        #: Slots it took back (UNREADY) while none was free: the next ones it frees pay this.
        self.debt = 0
        #: Jobs go to it packed (its FEATURES said it reads them); an attribute,
        #: not a look-up in :attr:`announced`: the router reads it for every job.
        self.packed = False
        #: The jobs one turn hands out to it go as one bundle (its FEATURES said
        #: it reads them, :mod:`.bundle`), of at most ``bundle_bytes``.
        self.bundle = False
        self.bundle_bytes = 0

    @property
    def extended(self) -> bool:
        return self.state is _P.EXTENDED

    def speaks(self, key: str) -> bool:
        """Its FEATURES named extension ``key`` (only a FEATURES fills ``announced``)."""
        return bool(self.announced.get(key))

    def holding(self) -> list[str]:
        """The msgids its FEATURES named as jobs it holds (:data:`HOLDING`), each once,
        in its order; entries that are not a msgid (not text, empty) are left out."""
        listed = self.announced.get(HOLDING)
        if not isinstance(listed, list):
            return []
        return list(dict.fromkeys(m for m in listed if isinstance(m, str) and m))

    def receive(self, message: Message) -> list[Message]:
        """A message from the peer; returns what to send back (ACK + FEATURES to its INFORM)."""
        if self.state is _P.GONE:
            raise _illegal("router", f"receiving {message.command}", self.state)
        if isinstance(message, Inform):
            return self._on_inform(message)
        if self.state is _P.NEW:
            # The reference router drops what an unknown worker sends; so do we.
            raise _illegal("router", message.command, self.state)
        if isinstance(message, Features):
            self.announced = dict(message.features)
            self.packed = self.speaks(PACKED)
            self.bundle_bytes = bundle_bytes(self.announced.get(BUNDLE))
            self.bundle = self.bundle_bytes > 0
            self.state = _P.EXTENDED
        elif isinstance(message, Ready):
            self.free_slot()
        elif isinstance(message, (Done, Nack)):
            self.job_reported()
        elif isinstance(message, Unready):
            self.take_back(message.count)
        elif isinstance(message, Kbai):
            self.state = _P.GONE
        return []

    # The router reads READY and DONE straight from their frames (no message
    # object: they come once per job); it tells the session with these.
    def free_slot(self) -> bool:
        """The peer freed a slot (READY, DONE, NACK, or a job that could not be sent
        to it): True when the slot is free, False when it paid an UNREADY debt."""
        if self.debt:
            self.debt -= 1
            return False
        self.credit += 1
        return True

    def reported(self) -> None:
        """A DONE or NACK came: the peer speaks our extensions (it reports each job)."""
        self.state = _P.EXTENDED

    def job_reported(self) -> bool:
        """A DONE or NACK came (:meth:`reported`) and freed its slot (:meth:`free_slot`)."""
        self.state = _P.EXTENDED
        if self.debt:
            self.debt -= 1
            return False
        self.credit += 1
        return True

    def take_back(self, count: int) -> int:
        """UNREADY ``count``: free slots go first, the rest is owed; returns the slots taken."""
        self.state = _P.EXTENDED
        taken = min(count, self.credit)
        self.credit -= taken
        self.debt += count - taken
        return taken

    def hand_out(self) -> None:
        """A job handed out to the peer: it uses one of its free slots."""
        # Credit comes only after INFORM (READY, DONE, NACK): one test per job.
        if self.credit > 0 and self.state is not _P.GONE:
            self.credit -= 1
            return
        if self.state is _P.NEW or self.state is _P.GONE:
            raise _illegal("router", "handing out a job", self.state)
        raise ProtocolError("router: handing out a job with no free slot at the peer")

    def dispatch(self, message: Request) -> Request:
        """A job handed out to the peer, as a message (see :meth:`hand_out`)."""
        self.hand_out()
        return message

    def cancel(self, job_msgid: str) -> Cancel:
        """CANCEL for a job the peer runs (only a peer whose FEATURES named ``"cancel"``)."""
        if not self.speaks("cancel"):
            raise _illegal("router", "CANCEL (the peer did not announce it)", self.state)
        return Cancel(msgid=new_msgid(), job_msgid=job_msgid)

    def poisoned(self, job_msgid: str, reason: str) -> Reject | None:
        """REJECT telling the peer that a job whose death it reported is set aside
        (``reason``), so that it records the job's end; None if it did not announce
        ``"poisoned"`` (it takes the death for one the job survives)."""
        if not self.speaks("poisoned"):
            return None
        return Reject(msgid=new_msgid(), job_msgid=job_msgid, reason=reason)

    def _on_inform(self, message: Inform) -> list[Message]:
        if self.state is not _P.NEW:
            raise _illegal("router", "a second INFORM", self.state)
        if message.peer_type != C.PEER_WORKER:
            raise ProtocolError("router: a scheduler INFORM on the backend")
        self.queues = message.effective_queues()
        self.state = _P.INFORMED
        # Only a peer that got FEATURES uses our extensions (a reference job
        # manager ignores a command it does not know once it has its ACK).
        return [
            Ack(msgid=new_msgid(), ack_msgid=message.msgid),
            Features(msgid=new_msgid(), features=self.our_features),
        ]


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


_C = ClientState


class ClientSession:
    """A client's FEATURES handshake with a router's frontend."""

    def __init__(self, features: Mapping[str, Any]) -> None:
        self.state = _C.IDLE
        self.our_features = dict(features)
        #: The router's answer (None: not yet, or the reference router).
        self.router_features: dict[str, Any] | None = None
        #: REQUESTs may go packed (the answer said ``"packed"``); an attribute,
        #: not a look-up in :attr:`router_features`: the client reads it per job.
        self.send_packed = False
        #: FEATURES answers received so far (a new one says the router read
        #: everything sent before the FEATURES it answers, see :meth:`probe`).
        self.answers = 0
        #: Until when (the caller's clock) an answer to :meth:`ask` may come.
        self.decide_by = 0.0

    def speaks(self, key: str) -> bool:
        return self.router_features is not None and bool(self.router_features.get(key))

    @property
    def asking(self) -> bool:
        """Our FEATURES went and nothing came back yet (before the deadline)."""
        return self.state is _C.ASKING

    def ask(self, now: float, *, wait: float) -> Features:
        """Our FEATURES (sent first on a new socket, or again to re-check the router)."""
        self.state = _C.ASKING
        self.router_features = None
        self.send_packed = False
        self.decide_by = now + wait
        return Features(msgid=new_msgid(), features=self.our_features)

    def probe(self) -> Features:
        """Our FEATURES again to a router that answered: its next answer comes once
        it read all we sent before (nothing it said is forgotten meanwhile)."""
        if self.state is not _C.ANSWERED:
            raise _illegal("client", "FEATURES to a router that did not answer", self.state)
        return Features(msgid=new_msgid(), features=self.our_features)

    def receive(self, message: Message) -> None:
        """A message from the router."""
        if isinstance(message, Features):
            self.answered(message.features)
        else:
            self.heard()

    def answered(self, features: Mapping[str, Any]) -> None:
        """The router's FEATURES: an answer (to our first FEATURES, a later one, or
        a bulk sender's on the same socket) says the router is ours."""
        if self.state is _C.IDLE:
            raise _illegal("client", "receiving FEATURES", self.state)
        self.router_features = dict(features)
        self.send_packed = bool(features.get(PACKED))
        self.answers += 1
        self.state = _C.ANSWERED

    def heard(self) -> None:
        """Something other than FEATURES came (the client may not decode it: an ACK)."""
        state = self.state
        if state is _C.ASKING:
            self.state = _C.REFERENCE
        elif state is _C.IDLE:
            raise _illegal("client", "receiving a message", state)

    def tick(self, now: float) -> None:
        """Time passed: no answer by the deadline means the reference router."""
        if self.state is _C.ASKING and now >= self.decide_by:
            self.state = _C.REFERENCE
