"""The sans-IO eMQP session: each side's transitions, and each event illegal in a state."""

from __future__ import annotations

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
    Message,
    Nack,
    Ready,
    Reject,
    Reply,
    Request,
    Unready,
    new_msgid,
)
from django_eventmq.protocol import constants as C
from django_eventmq.protocol.client_session import ClientSession
from django_eventmq.protocol.features import (
    FEATURES_WAIT,
    HOLDING,
    JOBMANAGER_FEATURES,
    ROUTER_FEATURES,
    TROUBLE,
)
from django_eventmq.protocol.packed import PACKED
from django_eventmq.protocol.session import JobManagerSession, RouterPeerSession
from django_eventmq.protocol.transitions import ClientState, JobManagerState, PeerState

JM = JobManagerState
QUEUES = ((10, "default"),)


def request() -> Request:
    return Request(msgid=new_msgid(), queue="default", headers=Headers(), body_text="{}")


def heartbeat() -> Heartbeat:
    return Heartbeat(msgid=new_msgid(), timestamp=1.0)


def features(**said: int) -> Features:
    return Features(msgid=new_msgid(), features=said)


def commands(messages: list[Message]) -> list[str]:
    return [m.command for m in messages]


# -- job manager side -----------------------------------------------------------------


def informing() -> JobManagerSession[str]:
    session: JobManagerSession[str] = JobManagerSession()
    session.inform(QUEUES)
    return session


def ack_of(session: JobManagerSession[str]) -> Ack:
    return Ack(msgid=new_msgid(), ack_msgid=session._inform_msgid)


def deciding(now: float = 0.0) -> JobManagerSession[str]:
    session = informing()
    session.receive(ack_of(session), now)
    return session


def extended(**said: int) -> JobManagerSession[str]:
    session = deciding()
    session.receive(features(**(said or dict(ROUTER_FEATURES))), 0.0)
    assert session.state is JM.EXTENDED
    return session


def reference() -> JobManagerSession[str]:
    session = deciding()
    session.receive(heartbeat(), 0.0)
    return session


def test_jm_inform_opens_the_conversation() -> None:
    session: JobManagerSession[str] = JobManagerSession()
    assert session.state is JM.IDLE
    inform = session.inform(QUEUES)
    assert isinstance(inform, Inform) and inform.queues == QUEUES
    assert inform.peer_type == C.PEER_WORKER
    assert session.state is JM.INFORMING and not session.connected


def test_jm_inform_twice_is_illegal() -> None:
    session = informing()
    with pytest.raises(ProtocolError, match="INFORMING"):
        session.inform(QUEUES)


@pytest.mark.parametrize("make", [JobManagerSession, lambda: closed()])
def test_jm_receiving_before_inform_or_after_close_is_illegal(make) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ProtocolError, match="receiving HEARTBEAT"):
        make().receive(heartbeat(), 0.0)


def closed() -> JobManagerSession[str]:
    session = deciding()
    session.close()
    return session


def test_jm_ack_of_our_inform_connects_and_starts_the_features_wait() -> None:
    session = deciding(now=10.0)
    assert session.state is JM.DECIDING and session.connected and not session.settled
    session.tick(10.0 + FEATURES_WAIT - 0.01)
    assert session.state is JM.DECIDING
    session.tick(10.0 + FEATURES_WAIT)
    assert session.state is JM.REFERENCE


def test_jm_ack_of_another_message_changes_nothing() -> None:
    session = informing()
    session.receive(Ack(msgid=new_msgid(), ack_msgid="not-our-inform"), 0.0)
    assert session.state is JM.INFORMING


def test_jm_features_after_the_ack_settles_extended_and_is_answered() -> None:
    session = deciding()
    answer = session.receive(features(**ROUTER_FEATURES), 0.0)
    assert session.state is JM.EXTENDED and session.extended
    assert len(answer) == 1 and isinstance(answer[0], Features)
    assert answer[0].features == dict(JOBMANAGER_FEATURES)
    assert session.router_features == dict(ROUTER_FEATURES)
    assert session.send_packed  # ROUTER_FEATURES says packed


def test_jm_packed_only_when_the_router_said_so() -> None:
    session = extended(done=1)
    assert not session.send_packed


def test_jm_features_without_done_settles_reference() -> None:
    session = deciding()
    assert session.receive(features(done=0), 0.0)  # still answered
    assert session.state is JM.REFERENCE


def test_jm_anything_but_features_first_means_the_reference() -> None:
    session = reference()
    assert session.state is JM.REFERENCE and session.settled and not session.extended


def test_jm_features_before_the_ack_settle_at_the_ack() -> None:
    session = informing()
    session.receive(features(**ROUTER_FEATURES), 0.0)
    assert session.state is JM.INFORMING
    session.receive(ack_of(session), 0.0)
    assert session.state is JM.EXTENDED


def test_jm_features_without_done_before_the_ack_settle_reference_at_the_ack() -> None:
    session = informing()
    session.receive(features(done=0), 0.0)
    session.receive(ack_of(session), 0.0)
    assert session.state is JM.REFERENCE


@pytest.mark.parametrize("settled", [reference, extended])
def test_jm_features_after_settling_is_illegal_and_unanswered(settled) -> None:  # type: ignore[no-untyped-def]
    session = settled()
    state = session.state
    with pytest.raises(ProtocolError, match="FEATURES"):
        session.receive(features(packed=1), 0.0)
    assert session.state is state


@pytest.mark.parametrize("goodbye", [Disconnect, Kbai])
def test_jm_goodbye_closes(goodbye: type) -> None:
    session = extended()
    session.receive(goodbye(msgid=new_msgid()), 0.0)
    assert session.state is JM.CLOSED and not session.connected and not session.send_packed


def test_jm_cancel_only_from_a_router_of_ours() -> None:
    extended().receive(Cancel(msgid=new_msgid(), job_msgid="j1"), 0.0)
    with pytest.raises(ProtocolError, match="CANCEL"):
        reference().receive(Cancel(msgid=new_msgid(), job_msgid="j1"), 0.0)


def test_jm_a_poisoned_jobs_reject_only_from_a_router_of_ours() -> None:
    extended().receive(Reject(msgid=new_msgid(), job_msgid="j1", reason="poisoned"), 0.0)
    with pytest.raises(ProtocolError, match="REJECT"):
        reference().receive(Reject(msgid=new_msgid(), job_msgid="j1", reason="poisoned"), 0.0)


def test_jm_done_and_nack_free_a_slot() -> None:
    session = extended()
    done = session.done("j1", "ok", '{"value": 1}')
    assert isinstance(done, Done) and done.job_msgid == "j1" and session.credit == 1
    nack = session.nack("j2", "stopping")
    assert isinstance(nack, Nack) and nack.reason == "stopping" and session.credit == 2


@pytest.mark.parametrize("make", [informing, deciding, reference, closed])
def test_jm_done_and_nack_need_extended(make) -> None:  # type: ignore[no-untyped-def]
    session = make()
    with pytest.raises(ProtocolError, match="DONE"):
        session.done("j1", "ok", "")
    with pytest.raises(ProtocolError, match="NACK"):
        session.nack("j1", "")
    assert session.credit == 0


def test_jm_reply_only_in_reference_mode() -> None:
    reply = reference().reply("j1", '{"value": 1}')
    assert isinstance(reply, Reply) and reply.reply_to == "j1"
    for make in (extended, deciding):
        with pytest.raises(ProtocolError, match="REPLY"):
            make().reply("j1", "")


def test_jm_partial_only_to_a_router_that_speaks_it() -> None:
    assert extended(done=1, partial=1).partial("j1", '{"value": 1}') is not None
    assert extended(done=1).partial("j1", '{"value": 1}') is None
    assert reference().partial("j1", '{"value": 1}') is None


def test_jm_no_ready_before_the_mode_is_settled() -> None:
    assert deciding().top_up(3) == []
    assert informing().top_up(3) == []


def test_jm_top_up_sends_ready_per_free_slot_once() -> None:
    session = reference()
    assert commands(session.top_up(3)) == ["READY"] * 3
    assert session.top_up(3) == []
    session.receive(request(), 0.0)
    assert session.credit == 2
    assert commands(session.top_up(3)) == ["READY"]


def test_jm_held_outcomes_take_their_slots_until_released() -> None:
    session = deciding()
    session.hold("outcome")
    assert session.held == 1
    session.receive(heartbeat(), 0.0)
    assert commands(session.top_up(3)) == ["READY"] * 2
    assert session.take_held() == ["outcome"] and session.held == 0


def test_jm_hold_when_settled_and_release_when_not_are_illegal() -> None:
    with pytest.raises(ProtocolError, match="holding"):
        reference().hold("x")
    with pytest.raises(ProtocolError, match="releasing"):
        deciding().take_held()


def test_jm_unready_when_the_router_holds_too_many_slots() -> None:
    session = extended()
    session.top_up(4)
    (unready,) = session.top_up(1, slack=1)
    assert isinstance(unready, Unready) and unready.count == 3
    assert session.credit == 1


def test_jm_no_unready_within_the_slack_or_to_a_router_without_it() -> None:
    session = extended()
    session.top_up(4)
    assert session.top_up(2, slack=2) == []
    plain = extended(done=1)
    plain.top_up(4)
    assert plain.top_up(1) == []
    assert plain.credit == 4


def test_jm_request_below_zero_credit_only_after_unready() -> None:
    ours = extended()  # speaks unready: credit may go below 0 (owed)
    ours.receive(request(), 0.0)
    assert ours.credit == -1
    plain = reference()
    plain.receive(request(), 0.0)
    assert plain.credit == 0


def test_jm_successor_carries_held_outcomes_to_a_new_conversation() -> None:
    session = informing()
    session.hold("a")
    session.close()
    fresh = session.successor()
    assert fresh.state is JM.IDLE and fresh.credit == 0 and fresh.held == 1
    assert session.held == 0


def test_jm_successor_of_a_live_conversation_is_illegal() -> None:
    with pytest.raises(ProtocolError, match="new conversation"):
        deciding().successor()


# -- router side ----------------------------------------------------------------------


def informed() -> RouterPeerSession:
    peer = RouterPeerSession()
    peer.receive(Inform(msgid=new_msgid(), queues=QUEUES))
    return peer


def test_router_answers_inform_with_ack_and_every_feature() -> None:
    peer = RouterPeerSession()
    inform = Inform(msgid=new_msgid(), queues=QUEUES)
    ack, said = peer.receive(inform)
    assert isinstance(ack, Ack) and ack.ack_msgid == inform.msgid
    assert isinstance(said, Features) and said.features == dict(ROUTER_FEATURES)
    assert peer.state is PeerState.INFORMED and peer.queues == QUEUES and not peer.extended


def test_router_drops_anything_before_inform() -> None:
    with pytest.raises(ProtocolError, match="NEW"):
        RouterPeerSession().receive(Ready(msgid=new_msgid()))


def test_router_second_inform_and_scheduler_inform_are_illegal() -> None:
    with pytest.raises(ProtocolError, match="second INFORM"):
        informed().receive(Inform(msgid=new_msgid(), queues=QUEUES))
    with pytest.raises(ProtocolError, match="scheduler"):
        RouterPeerSession().receive(Inform(msgid=new_msgid(), peer_type=C.PEER_SCHEDULER))


def test_router_features_from_the_peer_mark_it_extended() -> None:
    peer = informed()
    peer.receive(Features(msgid=new_msgid(), features=dict(JOBMANAGER_FEATURES)))
    assert peer.state is PeerState.EXTENDED and peer.packed and peer.speaks("unready")
    assert not informed().packed


@pytest.mark.parametrize(
    "message",
    [
        Done(msgid=new_msgid(), job_msgid="j", status="ok"),
        Nack(msgid=new_msgid(), job_msgid="j"),
        Unready(msgid=new_msgid(), count=1),
    ],
)
def test_router_done_nack_unready_mean_the_peer_speaks_our_extensions(message: Message) -> None:
    peer = informed()
    peer.receive(message)
    assert peer.extended


def test_router_credit_ready_dispatch_done() -> None:
    peer = informed()
    peer.receive(Ready(msgid=new_msgid()))
    peer.receive(Ready(msgid=new_msgid()))
    job = request()
    assert peer.dispatch(job) is job and peer.credit == 1
    peer.receive(Done(msgid=new_msgid(), job_msgid=job.msgid, status="ok"))
    assert peer.credit == 2


def test_router_dispatch_without_a_free_slot_is_illegal() -> None:
    with pytest.raises(ProtocolError, match="no free slot"):
        informed().dispatch(request())
    with pytest.raises(ProtocolError, match="NEW"):
        RouterPeerSession().dispatch(request())


def test_router_unready_takes_free_slots_then_owes() -> None:
    peer = informed()
    peer.receive(Ready(msgid=new_msgid()))
    peer.receive(Unready(msgid=new_msgid(), count=3))
    assert (peer.credit, peer.debt) == (0, 2)
    peer.receive(Nack(msgid=new_msgid(), job_msgid="j"))
    peer.receive(Ready(msgid=new_msgid()))
    assert (peer.credit, peer.debt) == (0, 0)
    peer.receive(Ready(msgid=new_msgid()))
    assert peer.credit == 1


def test_router_cancel_only_to_a_peer_of_ours() -> None:
    with pytest.raises(ProtocolError, match="CANCEL"):
        informed().cancel("j1")
    peer = informed()
    peer.receive(Features(msgid=new_msgid(), features={"cancel": 1}))
    assert peer.cancel("j1").job_msgid == "j1"


def test_router_tells_a_poisoned_job_only_to_a_peer_that_records_it() -> None:
    """A job manager of ours records the end of a job set aside after the death it
    reported; one that did not announce ``poisoned`` (a reference one) is told nothing."""
    assert informed().poisoned("j1", "poisoned: 3 deaths") is None
    peer = informed()
    peer.receive(Features(msgid=new_msgid(), features={"done": 1, "cancel": 1}))
    assert peer.poisoned("j1", "poisoned: 3 deaths") is None
    peer = informed()
    peer.receive(Features(msgid=new_msgid(), features=dict(JOBMANAGER_FEATURES)))
    reject = peer.poisoned("j1", "poisoned: 3 deaths")
    assert reject is not None and (reject.job_msgid, reject.reason) == ("j1", "poisoned: 3 deaths")


def test_router_cancel_needs_the_peer_to_have_named_it() -> None:
    peer = informed()
    peer.receive(Features(msgid=new_msgid(), features={"done": 1, PACKED: 1}))
    assert peer.extended and peer.packed and not peer.speaks("cancel")
    with pytest.raises(ProtocolError, match="CANCEL"):
        peer.cancel("j1")


def test_router_frame_level_calls_count_as_the_messages_do() -> None:
    """What the router tells the session without a message (READY and DONE read
    straight from frames) moves credit and debt as receive() does."""
    by_frames, by_messages = informed(), informed()
    assert by_frames.free_slot() and by_frames.free_slot()
    for _ in range(2):
        by_messages.receive(Ready(msgid=new_msgid()))
    by_frames.hand_out()
    by_messages.dispatch(request())
    assert by_frames.take_back(3) == 1
    by_messages.receive(Unready(msgid=new_msgid(), count=3))
    by_frames.reported()
    assert not by_frames.free_slot()  # pays the debt
    by_messages.receive(Done(msgid=new_msgid(), job_msgid="j", status="ok"))
    assert (
        (by_frames.state, by_frames.credit, by_frames.debt)
        == (
            by_messages.state,
            by_messages.credit,
            by_messages.debt,
        )
        == (PeerState.EXTENDED, 0, 1)
    )


def test_router_a_peer_that_stops_gets_no_more_jobs_and_still_reports() -> None:
    """NACK "stopping": the slots it announced are void, none it frees is used,
    its DONEs still count as reports (it speaks our extensions)."""
    peer = informed()
    peer.receive(Ready(msgid=new_msgid()))
    peer.receive(Ready(msgid=new_msgid()))
    peer.stop()
    assert (peer.state, peer.credit, peer.stopping, peer.extended) == (
        PeerState.STOPPING,
        0,
        True,
        True,
    )
    assert not peer.free_slot() and not peer.job_reported() and peer.take_back(2) == 0
    assert (peer.credit, peer.debt) == (0, 0)
    with pytest.raises(ProtocolError, match="STOPPING"):
        peer.hand_out()
    peer.receive(Kbai(msgid=new_msgid()))
    assert peer.state is PeerState.GONE


def test_router_kbai_ends_the_conversation() -> None:
    peer = informed()
    peer.receive(Kbai(msgid=new_msgid()))
    assert peer.state is PeerState.GONE
    with pytest.raises(ProtocolError, match="GONE"):
        peer.receive(Ready(msgid=new_msgid()))


def test_job_manager_and_router_sessions_agree() -> None:
    """The two sides wired to each other: extended mode, packed, and matching credit."""
    jm: JobManagerSession[str] = JobManagerSession()
    peer = RouterPeerSession()
    to_jm = peer.receive(jm.inform(QUEUES))
    to_router = [answer for message in to_jm for answer in jm.receive(message, 0.0)]
    to_router += jm.top_up(2)
    for message in to_router:
        peer.receive(message)
    assert jm.extended and peer.extended and jm.send_packed and peer.packed
    assert jm.credit == peer.credit == 2
    jm.receive(peer.dispatch(request()), 0.0)
    assert jm.credit == peer.credit == 1


# -- client side ----------------------------------------------------------------------


def test_client_asks_then_an_answer_says_ours() -> None:
    session = ClientSession({"batch": 1, PACKED: 1})
    asked = session.ask(0.0, wait=1.0)
    assert asked.features == {"batch": 1, PACKED: 1} and session.state is ClientState.ASKING
    session.receive(Features(msgid=new_msgid(), features={PACKED: 1, "batch": 1}))
    assert session.state is ClientState.ANSWERED
    assert session.send_packed and session.speaks("batch")


def test_client_something_else_first_means_the_reference() -> None:
    session = ClientSession({})
    session.ask(0.0, wait=1.0)
    session.receive(Ack(msgid=new_msgid(), ack_msgid="x"))
    assert session.state is ClientState.REFERENCE and session.router_features is None


def test_client_no_answer_by_the_deadline_means_the_reference() -> None:
    session = ClientSession({})
    session.ask(5.0, wait=1.0)
    session.tick(5.9)
    assert session.state is ClientState.ASKING
    session.tick(6.0)
    assert session.state is ClientState.REFERENCE and not session.send_packed


def test_client_asking_again_forgets_the_answer() -> None:
    session = ClientSession({})
    session.ask(0.0, wait=1.0)
    session.receive(Features(msgid=new_msgid(), features={PACKED: 1}))
    session.ask(1.0, wait=1.0)
    assert session.state is ClientState.ASKING and not session.send_packed


def test_client_answers_counts_every_features_and_probe_keeps_the_answer() -> None:
    session = ClientSession({"batch": 1})
    with pytest.raises(ProtocolError, match="did not answer"):
        session.probe()
    session.ask(0.0, wait=1.0)
    session.answered({PACKED: 1})
    probe = session.probe()
    assert probe.features == {"batch": 1} and session.send_packed and session.answers == 1
    session.receive(Features(msgid=new_msgid(), features={PACKED: 1, "batch": 1}))
    assert session.answers == 2 and session.speaks("batch")


def test_client_heard_settles_only_an_open_question() -> None:
    session = ClientSession({})
    session.ask(0.0, wait=1.0)
    assert session.asking
    session.heard()  # an ACK the client did not decode
    assert session.state is ClientState.REFERENCE and not session.asking
    session.answered({})  # a late answer still says ours
    session.heard()
    assert session.state is ClientState.ANSWERED
    with pytest.raises(ProtocolError, match="IDLE"):
        ClientSession({}).heard()


def test_client_receiving_before_asking_is_illegal() -> None:
    with pytest.raises(ProtocolError, match="IDLE"):
        ClientSession({}).receive(Features(msgid=new_msgid(), features={}))


def test_jm_restates_its_features_to_our_router_only_and_keeps_them() -> None:
    session = extended()
    session.our_features = {**session.our_features, HOLDING: ["m1"]}
    said = session.restate(TROUBLE, "worker processes cannot start: boom")
    assert isinstance(said, Features)
    assert said.features[TROUBLE] == "worker processes cannot start: boom"
    assert HOLDING not in said.features  # said once, at the connection
    cleared = session.restate(TROUBLE, "")
    assert isinstance(cleared, Features) and TROUBLE not in cleared.features
    old = reference()
    assert old.restate(TROUBLE, "boom") is None  # a reference router is never told
    assert old.our_features[TROUBLE] == "boom"  # the next connection's answer says it
