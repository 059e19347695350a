"""One peer's eMQP conversation as a sans-IO state machine (no sockets, no clock).

Messages go in (:meth:`receive`), the messages to send come out; the time is
passed in as a float and never read here. Two sides:

- :class:`JobManagerSession`: a job manager's view of its router on one
  socket: INFORM -> ACK, then the FEATURES exchange. A router of ours sends
  FEATURES right after its ACK; the reference router never does, so the
  session settles on :attr:`JobManagerState.REFERENCE` when anything else
  comes first or a deadline passes. It also counts the credit (free slots the
  router holds for us) and says when READY or UNREADY is due.
- :class:`RouterPeerSession`: a router's view of one job manager: its INFORM
  (answered with ACK and our FEATURES), the features it announced, and its
  credit (READY, DONE and NACK give a slot, a job handed out takes one,
  UNREADY takes some back, owed when none is free, a peer that stops voids it).
- a client's FEATURES handshake with a router's frontend (no INFORM there)
  is :mod:`.client_session`.

Each state change is a step in its side's table (:mod:`.transitions`): a
method whose event the table refuses in the current state raises
:class:`ProtocolError` naming the event and the state. What each side
announces in FEATURES is :mod:`.features`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, TypeVar

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import constants as C
from django_eventmq.protocol.bundle import BUNDLE

# Re-exported: the client names it here.
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

# Re-exported: the router and the job manager name these here.
from django_eventmq.protocol.features import (
    FEATURES_WAIT,
    HOLDING,
    JOBMANAGER_FEATURES,
    ROUTER_FEATURES,
    bundle_bytes,
)
from django_eventmq.protocol.ids import new_msgid
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
from django_eventmq.protocol.transitions import (
    JOBMANAGER_TABLE,
    PEER_TABLE,
    JobManagerEvent,
    JobManagerState,
    PeerEvent,
    PeerState,
    step,
)

_T = TypeVar("_T")

# -- the job manager's side ---------------------------------------------------------

_JM = JobManagerState
_JE = JobManagerEvent
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
        #: A FEATURES came before the ACK of our INFORM: its event, taken at the ACK.
        self._early: JobManagerEvent | None = None
        self._held: list[_T] = []

    def _step(self, event: JobManagerEvent, what: str = "") -> None:
        self.state = step("job manager", JOBMANAGER_TABLE, self.state, event, what)

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
        self._step(_JE.INFORM)
        message = Inform(msgid=new_msgid(), queues=queues, peer_type=C.PEER_WORKER)
        self._inform_msgid = message.msgid
        return message

    def receive(self, message: Message, now: float) -> list[Message]:
        """A message from the router; returns what to send back (our FEATURES answer).

        Raises :class:`ProtocolError` for a message the router may not send now
        (the caller logs and drops it).
        """
        state = self.state
        kind = type(message)
        if kind is Request and (state is _JM.EXTENDED or state is _JM.REFERENCE):
            self._on_request()  # the per-job case, settled: the table's self-loop
            return []
        what = f"receiving {message.command}"
        if isinstance(message, Features):
            return self._on_features(message, what)
        if state is _JM.DECIDING:
            self._step(_JE.NOT_FEATURES_FIRST, what)
        if kind is Ack:
            assert isinstance(message, Ack)
            if message.ack_msgid != self._inform_msgid:
                self._step(_JE.MESSAGE, what)  # an ACK of something else
            else:
                self._on_ack(now, what)
        elif kind is Request:
            self._step(_JE.REQUEST, what)
            self._on_request()
        elif isinstance(message, (Cancel, Reject)):
            self._step(_JE.ROUTER_EXTENSION, what)
        elif isinstance(message, (Disconnect, Kbai)):
            self._step(_JE.GOODBYE, what)
            self.close()
        else:
            self._step(_JE.MESSAGE, what)
        return []

    def tick(self, now: float) -> None:
        """Time passed: settle on REFERENCE once the FEATURES deadline is over."""
        if self.state is _JM.DECIDING and now >= self._decide_by:
            self._step(_JE.DEADLINE)

    def close(self) -> None:
        """The socket is gone; a new one starts a new session."""
        self._step(_JE.CLOSE)
        self.send_packed = False
        self.send_bundle = False

    def successor(self) -> JobManagerSession[_T]:
        """A fresh session for a new socket, taking over the outcomes still held."""
        self._step(_JE.SUCCESSOR)
        fresh: JobManagerSession[_T] = JobManagerSession(
            features=self.our_features, features_wait=self.features_wait
        )
        fresh._held = self._held
        self._held = []
        return fresh

    def hold(self, item: _T) -> None:
        """Keep an outcome until the mode is settled."""
        self._step(_JE.HOLD)
        self._held.append(item)

    def peek_held(self) -> list[_T]:
        """The held outcomes, left held (a new connection names their jobs)."""
        return list(self._held)

    def take_held(self) -> list[_T]:
        """The held outcomes, once the mode is settled (then report each)."""
        self._step(_JE.RELEASE)
        held, self._held = self._held, []
        return held

    def done(self, job_msgid: str, status: str, payload: str) -> Done:
        """DONE for a finished job; it frees the slot at the router."""
        if self.state is not _JM.EXTENDED:  # the one state the table allows it in
            self._step(_JE.DONE)
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
        self._step(_JE.NACK)
        self.credit += 1
        return Nack(msgid=new_msgid(), job_msgid=job_msgid, reason=reason)

    def reply(self, job_msgid: str, payload: str) -> Reply:
        """REPLY for a finished job (reference mode; the slot is freed by READY)."""
        if self.state is not _JM.REFERENCE:  # the one state the table allows it in
            self._step(_JE.REPLY)
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

    # -- what a message does besides its step -------------------------------------------
    def _on_ack(self, now: float, what: str) -> None:
        if self.state is not _JM.INFORMING:
            self._step(_JE.INFORM_ACKED, what)  # a repeat: changes nothing
            return
        self._step(_JE.INFORM_ACKED)
        self._decide_by = now + self.features_wait
        if self._early is not None:  # the FEATURES that came first, taken now
            self._step(self._early)

    def _on_request(self) -> None:
        # Below 0 only after UNREADY: slots the router owes us back.
        if self.credit > 0 or self.router_speaks("unready"):
            self.credit -= 1

    def _on_features(self, message: Features, what: str) -> list[Message]:
        speaks_done = bool(message.features.get("done", 1))
        event = _JE.FEATURES if speaks_done else _JE.FEATURES_WITHOUT_DONE
        before = self.state
        self._step(event, what)
        if before is _JM.INFORMING:  # settled when the ACK comes
            self._early = event
        self.router_features = dict(message.features)
        answer = Features(msgid=new_msgid(), features=self.our_features)
        # After our answer: what we send from now on may go packed.
        self.send_packed = bool(message.features.get(PACKED))
        self.bundle_bytes = bundle_bytes(message.features.get(BUNDLE))
        self.send_bundle = self.bundle_bytes > 0
        return [answer]


# -- the router's side ----------------------------------------------------------------

_P = PeerState
_PE = PeerEvent


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
        #: Free slots it announced and we have not used (none once it stops or leaves).
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

    @classmethod
    def registered(cls, queues: QueueSpec) -> RouterPeerSession:
        """A peer given its queues directly, with no INFORM to answer (the routing's
        own tests register workers so): past its INFORM, nothing to send."""
        session = cls()
        session._step(_PE.INFORM)
        session.queues = queues
        return session

    def _step(self, event: PeerEvent, what: str = "") -> None:
        self.state = step("router", PEER_TABLE, self.state, event, what)

    @property
    def extended(self) -> bool:
        """It speaks our extensions (a peer that stops said so with a NACK)."""
        state = self.state
        return state is _P.EXTENDED or state is _P.STOPPING

    @property
    def stopping(self) -> bool:
        """It is shutting down (:meth:`stop`): no more jobs for it."""
        return self.state is _P.STOPPING

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
        if isinstance(message, Inform):
            return self._on_inform(message)
        what = f"receiving {message.command}"
        if isinstance(message, Features):
            self._step(_PE.FEATURES, what)
            self.announced = dict(message.features)
            self.packed = self.speaks(PACKED)
            self.bundle_bytes = bundle_bytes(self.announced.get(BUNDLE))
            self.bundle = self.bundle_bytes > 0
        elif isinstance(message, Ready):
            self.free_slot()
        elif isinstance(message, (Done, Nack)):
            self.job_reported()
        elif isinstance(message, Unready):
            self.take_back(message.count)
        elif isinstance(message, Kbai):
            self._step(_PE.GOODBYE, what)
            self.credit = self.debt = 0  # void: nothing more goes to it
        else:
            self._step(_PE.MESSAGE, what)
        return []

    # The router reads READY and DONE straight from their frames (no message
    # object: they come once per job); it tells the session with these. A
    # peer of ours or a reference one: a plain check stands for the table's
    # self-loop, the table decides the rest.
    def free_slot(self) -> bool:
        """The peer freed a slot (READY, DONE, NACK, or a job that could not be sent
        to it): True when the slot is free, False when it paid an UNREADY debt or
        the peer stops."""
        state = self.state
        if state is not _P.EXTENDED and state is not _P.INFORMED:
            self._step(_PE.SLOT_FREED)
            return False  # stopping: no slot it frees is used
        if self.debt:
            self.debt -= 1
            return False
        self.credit += 1
        return True

    def reported(self) -> None:
        """A DONE or NACK came: the peer speaks our extensions (it reports each job)."""
        if self.state is not _P.EXTENDED:
            self._step(_PE.REPORTED)

    def job_reported(self) -> bool:
        """A DONE or NACK came (:meth:`reported`) and freed its slot (:meth:`free_slot`)."""
        if self.state is not _P.EXTENDED:
            self._step(_PE.REPORTED)
            if self.state is _P.STOPPING:
                return False
        if self.debt:
            self.debt -= 1
            return False
        self.credit += 1
        return True

    def take_back(self, count: int) -> int:
        """UNREADY ``count``: free slots go first, the rest is owed; returns the slots
        taken (none from a peer that stops: it has none, and frees none)."""
        self._step(_PE.UNREADY)
        if self.state is _P.STOPPING:
            return 0
        taken = min(count, self.credit)
        self.credit -= taken
        self.debt += count - taken
        return taken

    def stop(self) -> None:
        """The peer is shutting down (NACK "stopping"): the slots it announced are
        void and none it frees is used; it keeps and reports its jobs."""
        self._step(_PE.STOP)
        self.credit = 0

    def hand_out(self) -> None:
        """A job handed out to the peer: it uses one of its free slots."""
        # Credit only in INFORMED or EXTENDED (stopping and leaving void it): one test per job.
        if self.credit > 0:
            self.credit -= 1
            return
        self._step(_PE.HAND_OUT)
        raise ProtocolError("router: handing out a job with no free slot at the peer")

    def dispatch(self, message: Request) -> Request:
        """A job handed out to the peer, as a message (see :meth:`hand_out`)."""
        self.hand_out()
        return message

    def cancel(self, job_msgid: str) -> Cancel:
        """CANCEL for a job the peer runs (only a peer whose FEATURES named ``"cancel"``)."""
        if not self.speaks("cancel"):
            raise ProtocolError(
                f"router: CANCEL (the peer did not announce it) is not allowed in state "
                f"{self.state.name}"
            )
        return Cancel(msgid=new_msgid(), job_msgid=job_msgid)

    def poisoned(self, job_msgid: str, reason: str) -> Reject | None:
        """REJECT telling the peer that a job whose death it reported is set aside
        (``reason``), so that it records the job's end; None if it did not announce
        ``"poisoned"`` (it takes the death for one the job survives)."""
        if not self.speaks("poisoned"):
            return None
        return Reject(msgid=new_msgid(), job_msgid=job_msgid, reason=reason)

    def _on_inform(self, message: Inform) -> list[Message]:
        informed = step("router", PEER_TABLE, self.state, _PE.INFORM, "a second INFORM")
        if message.peer_type != C.PEER_WORKER:
            raise ProtocolError("router: a scheduler INFORM on the backend")
        self.queues = message.effective_queues()
        self.state = informed
        # Only a peer that got FEATURES uses our extensions (a reference job
        # manager ignores a command it does not know once it has its ACK).
        return [
            Ack(msgid=new_msgid(), ack_msgid=message.msgid),
            Features(msgid=new_msgid(), features=self.our_features),
        ]
