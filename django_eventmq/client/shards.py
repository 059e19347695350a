"""Sending jobs to several router groups (shards): one client per group, jobs spread.

``BROKER_ADDR="tcp://a:47291,tcp://b:47291;tcp://c:47291,tcp://d:47291"``
names two groups, each with its own leader and journal (its PostgreSQL
schema). :class:`ShardedClient` holds one :class:`~.connection.Client` per
group (each connected to every member of its group, ``IMMEDIATE`` as
always) and sends each job to one group:

- the job's own group first: by a stable hash of its queue name
  (``SHARD_BY="queue"``, the default: a queue's jobs stay in one group, in
  order) or the groups in turn (``"round_robin"``), see
  :class:`~..runtime.addresses.ShardChooser`;
- a group with no router connected within ``SEND_TIMEOUT`` is marked down,
  and its jobs go to the next group (ring order) until a router of it is
  connected again (its channel watches the connection, so checking costs no
  wait). Nothing is queued toward a group that is down;
- a ``guarantee`` job is ACKed by whichever group stored it; one sent to a
  group that went away before its ACK is sent to the next group with the
  same msgid (if the first had stored it, it runs twice: at least once);
- replies, partials and ACKs come back on the socket of the group that took
  the job: the client remembers which group took which msgid.

Schedules (SCHEDULE / UNSCHEDULE) always go to the group of their queue's
hash, whatever ``SHARD_BY`` says, so an UNSCHEDULE finds its SCHEDULE.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from django_eventmq.client import bulk
from django_eventmq.client.connection import Client
from django_eventmq.client.inbox import Outcome
from django_eventmq.errors import BrokerUnavailable
from django_eventmq.protocol import (
    EMPTY_HEADERS,
    Cancel,
    Headers,
    Message,
    Request,
    Schedule,
    Unschedule,
    new_msgid,
)
from django_eventmq.runtime import transport
from django_eventmq.runtime.addresses import SHARD_BY_QUEUE, ShardChooser, shard_of_queue

logger = logging.getLogger("django_eventmq.client")

#: msgids whose group is remembered (for their replies), the most recent.
MAX_REMEMBERED = 100_000
#: Jobs handed to one group's pipeline at a time by :meth:`ShardedClient.send_many`.
CHUNK = 256
#: Seconds between looks for a group to come back while every group is down.
ALL_DOWN_POLL = 0.01

T = TypeVar("T")
Job = tuple[bytes, bytes, bytes, bytes]


class _GroupDown(Exception):
    """Raised out of a group's pipeline when no router of it is connected any more."""

    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.index = index


class ShardedClient:
    """Clients of several router groups; each job goes to one (see the module doc)."""

    def __init__(
        self,
        addr: str,
        clients: Sequence[Client],
        *,
        send_timeout: float = 5.0,
        shard_by: str = SHARD_BY_QUEUE,
    ) -> None:
        """``clients``: one per group, in ``BROKER_ADDR``'s order, made with ``watch_peer``."""
        self.addr = addr
        self.clients = list(clients)
        self.chooser = ShardChooser(len(self.clients), shard_by)
        self.send_timeout = send_timeout
        self.linger_ms = int(send_timeout * 1000)
        self.pid = os.getpid()
        self.thread = threading.current_thread()
        #: Groups that took nothing within SEND_TIMEOUT and have had no router since.
        self.down = [False] * len(self.clients)
        #: msgid -> the group that took it (replies come on its socket).
        self._where: dict[str, int] = {}

    # -- which group ----------------------------------------------------------------
    def _up(self, index: int) -> bool:
        """False while group ``index`` is marked down and still has no router connected."""
        if not self.down[index]:
            return True
        if self.clients[index].channel.peer_connected():
            self.down[index] = False
            logger.info(
                "router group %d (%s) is connected again: sending it jobs",
                index + 1,
                self.clients[index].addr,
            )
            return True
        return False

    def _mark_down(self, index: int, why: str) -> None:
        if not self.down[index]:
            logger.warning(
                "router group %d (%s) is not taking jobs (%s); its jobs go to the next "
                "group until a router of it is connected again",
                index + 1,
                self.clients[index].addr,
                why,
            )
        self.down[index] = True

    def _candidates(self, order: list[int]) -> list[int]:
        """The groups of ``order`` to try: those not down; all down: the first (it
        waits ``SEND_TIMEOUT`` for a router, as a single group does)."""
        up = [i for i in order if self._up(i)]
        return up or order[:1]

    def _ring(self, queue: bytes | str) -> list[int]:
        """Every group, the queue's own (by hash) first: where schedules go."""
        first = shard_of_queue(queue, len(self.clients))
        n = len(self.clients)
        return [(first + step) % n for step in range(n)]

    def _remember(self, msgid: str, index: int) -> None:
        where = self._where
        where[msgid] = index
        if len(where) > MAX_REMEMBERED:
            del where[next(iter(where))]

    def _try_groups(self, order: list[int], send: Callable[[Client], T]) -> tuple[int, T]:
        """``send`` on the first group of ``order`` that takes it; BrokerUnavailable if none."""
        errors: list[str] = []
        for index in self._candidates(order):
            try:
                result = send(self.clients[index])
            except BrokerUnavailable as exc:
                self._mark_down(index, str(exc))
                errors.append(f"group {index + 1}: {exc}")
                continue
            return index, result
        raise BrokerUnavailable(
            f"no router group of {self.addr} took the message: " + "; ".join(errors)
        )

    # -- sending ----------------------------------------------------------------------
    def send(self, message: Message) -> str:
        """Send ``message`` to the group of its queue (schedules: always by queue hash)."""
        if isinstance(message, Cancel):
            return self.cancel(message.job_msgid)
        queue = getattr(message, "queue", "")
        if isinstance(message, Schedule | Unschedule):
            order = self._ring(queue)
        else:
            order = self.chooser.order(queue)
        index, msgid = self._try_groups(order, lambda client: client.send(message))
        self._remember(msgid, index)
        return msgid

    def send_request_frames(self, msgid: bytes, queue: bytes, headers: bytes, body: bytes) -> None:
        """Send a REQUEST (the ``.delay()`` fast path) to the first group that takes it."""
        index, _ = self._try_groups(
            self.chooser.order(queue),
            lambda client: client.send_request_frames(msgid, queue, headers, body),
        )
        self._remember(msgid.decode(), index)

    def send_request_guaranteed(
        self,
        msgid: bytes,
        queue: bytes,
        headers: bytes,
        body: bytes,
        *,
        ack_timeout: float,
        retries: int,
    ) -> None:
        """Send a REQUEST until a group ACKs it (same msgid to the next group when one
        does not)."""
        index, _ = self._try_groups(
            self.chooser.order(queue),
            lambda client: client.send_request_guaranteed(
                msgid, queue, headers, body, ack_timeout=ack_timeout, retries=retries
            ),
        )
        self._remember(msgid.decode(), index)

    def send_many(
        self,
        requests: Iterable[Request | Job],
        *,
        guarantee: bool = True,
        window: int = bulk.CLIENT_WINDOW,
        ack_timeout: float = 2.0,
        give_up: float = bulk.DEFAULT_GIVE_UP,
        batch: int = bulk.DEFAULT_BATCH,
    ) -> bulk.SendResult:
        """:meth:`.Client.send_many` over the groups: a pipeline per group, each job to
        its group, a group that loses its router for ``SEND_TIMEOUT`` has its
        unacknowledged jobs sent to the next group (same msgids)."""
        encoded = bulk.encode_requests(requests)
        if not guarantee:
            result = bulk.SendResult()
            for msgid, queue, headers, body in encoded:
                self.send_request_frames(msgid, queue, headers, body)
                result.counts.setdefault(queue.decode(), bulk.QueueCounts()).sent += 1
            return result
        spread = _Spread(self, window=window, ack_timeout=ack_timeout, give_up=give_up, batch=batch)
        with self._holding():
            return spread.run(encoded)

    def request(
        self, queue: str, body_text: str, headers: Headers = EMPTY_HEADERS, msgid: str | None = None
    ) -> str:
        """Send a REQUEST; returns its msgid."""
        return self.send(
            Request(msgid=msgid or new_msgid(), queue=queue, headers=headers, body_text=body_text)
        )

    def schedule(self, queue: str, body_text: str, **kwargs: Any) -> str:
        """SCHEDULE, to the group of ``queue`` (see :meth:`.Client.schedule`)."""
        _index, msgid = self._try_groups(
            self._ring(queue), lambda client: client.schedule(queue, body_text, **kwargs)
        )
        return msgid

    def unschedule(self, queue: str, body_text: str, **kwargs: Any) -> str:
        """UNSCHEDULE, to the group of ``queue`` (where its SCHEDULE went)."""
        _index, msgid = self._try_groups(
            self._ring(queue), lambda client: client.unschedule(queue, body_text, **kwargs)
        )
        return msgid

    def cancel(self, job_msgid: str) -> str:
        """CANCEL to the group that took the job (not known here: to every group up)."""
        index = self._where.get(job_msgid)
        if index is not None:
            return self.clients[index].cancel(job_msgid)
        sent: list[str] = []
        for i in range(len(self.clients)):
            if self._up(i):
                try:
                    sent.append(self.clients[i].cancel(job_msgid))
                except BrokerUnavailable as exc:
                    self._mark_down(i, str(exc))
        if not sent:
            raise BrokerUnavailable(f"no router group of {self.addr} took the CANCEL")
        return sent[0]

    # -- receiving ----------------------------------------------------------------------
    def outcome(self, job_msgid: str, timeout: float | None) -> Outcome | None:
        """The REPLY or REJECT for ``job_msgid``, from the group that took it."""
        index = self._where.get(job_msgid)
        if index is not None:
            return self.clients[index].outcome(job_msgid, timeout)

        def look(client: Client) -> Outcome | None:
            return client.outcome(job_msgid, 0)

        return self._any(look, timeout)

    def next_part(self, job_msgid: str, timeout: float | None) -> tuple[bool, Any] | None:
        """The next partial or the outcome of ``job_msgid`` (see :meth:`.Client.next_part`)."""
        index = self._where.get(job_msgid)
        if index is not None:
            return self.clients[index].next_part(job_msgid, timeout)
        return self._any(lambda client: client.next_part(job_msgid, 0), timeout)

    def outcome_now(self, job_msgid: str) -> Outcome | None:
        """The outcome of ``job_msgid`` if it is here now, from any thread
        (:meth:`.Client.outcome_now` of the group that took it, or of each)."""
        index = self._where.get(job_msgid)
        for client in self.clients if index is None else (self.clients[index],):
            found = client.outcome_now(job_msgid)
            if found is not None:
                return found
        return None

    @contextlib.contextmanager
    def _holding(self) -> Iterator[None]:
        """Every group's client's lock (around a use of their sockets that is not
        one of their own methods: a poller, the send_many pipelines)."""
        with contextlib.ExitStack() as stack:
            for client in self.clients:
                stack.enter_context(client.lock)
            yield

    def seen(self, job_msgid: str) -> Outcome | None:
        """The outcome a handle already read, from whichever group's client has it."""
        for client in self.clients:
            found = client.seen(job_msgid)
            if found is not None:
                return found
        return None

    def _any(self, look: Callable[[Client], T], timeout: float | None) -> T | None:
        """``look`` at every group's client until one finds something, for ``timeout``
        seconds (None: for ever), reading what arrives meanwhile."""
        deadline = None if timeout is None else time.monotonic() + timeout
        poller = transport.Poller(*(client.channel for client in self.clients))
        while True:
            for client in self.clients:
                client.drain()
                found = look(client)
                if found is not None:
                    return found
            left = 1.0 if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return None
            with self._holding():
                poller.poll(max(1, int(min(left, 1.0) * 1000)))

    def drain(self) -> int:
        """Read what every group sent us without waiting; returns how many messages."""
        return sum(client.drain() for client in self.clients)

    def confirm_read(self, deadline: float) -> bool | None:
        """Every group's :meth:`.Client.confirm_read`: False if one did not confirm,
        None if none could say, else True."""
        answers = [client.confirm_read(deadline) for client in self.clients]
        if False in answers:
            return False
        return True if True in answers else None

    @property
    def router_features(self) -> dict[str, Any] | None:
        """The first group's router's FEATURES (see :attr:`.Client.router_features`)."""
        return self.clients[0].router_features

    @property
    def closed(self) -> bool:
        return all(client.closed for client in self.clients)

    def take_over(self) -> None:
        """Used from now on by the calling thread (the one that used it ended)."""
        self.thread = threading.current_thread()
        for client in self.clients:
            client.take_over()

    def close(self) -> None:
        for client in self.clients:
            client.close()


class _Spread:
    """One guaranteed :meth:`ShardedClient.send_many`: a pipeline per group that is up."""

    def __init__(
        self,
        owner: ShardedClient,
        *,
        window: int,
        ack_timeout: float,
        give_up: float,
        batch: int,
    ) -> None:
        bulk.check_window(window, ack_timeout, give_up, batch)
        self.owner = owner
        n = len(owner.clients)
        self.options: dict[str, Any] = {
            "window": window,
            "ack_timeout": ack_timeout,
            "give_up": give_up,
            "batch": batch,
        }
        self.result = bulk.SendResult()
        self.pipelines: list[bulk.Pipeline | None] = [None] * n
        self.finished: list[bulk.Pipeline] = []  # those of groups that went away
        #: Per group: jobs handed to its pipeline and not answered yet.
        self.unanswered: list[dict[bytes, Job]] = [{} for _ in range(n)]
        self.buffers: list[list[Job]] = [[] for _ in range(n)]
        #: Since when each group has had no router connected (None: it has one).
        self.lost_since: list[float | None] = [None] * n
        #: Jobs taken back from a group that went away, to send elsewhere.
        self.again: list[Job] = []
        self.moved: dict[str, int] = {}
        #: By queue: the group its jobs go to while every group is up (SHARD_BY=queue).
        self.by_queue: dict[bytes, int] = {}
        self.keep_choice = owner.chooser.shard_by == SHARD_BY_QUEUE

    def run(self, jobs: Iterable[Job]) -> bulk.SendResult:
        for job in jobs:
            self._route(job)
        while True:
            self._route_again()
            for index, buffered in enumerate(self.buffers):
                if buffered:
                    self._feed(index)
            busy = [i for i, p in enumerate(self.pipelines) if p is not None and p.in_flight]
            if not busy and not self.again and not any(self.buffers):
                break
            for index in busy:
                sender = self.pipelines[index]
                assert sender is not None
                try:
                    sender.flush()
                except _GroupDown:
                    self._drop(index)
        return self._result()

    def _route(self, job: Job) -> None:
        owner = self.owner
        queue = job[1]
        index = self.by_queue.get(queue)
        if index is None:
            order = owner.chooser.order(queue)
            index = next((i for i in order if owner._up(i)), None)
            if index is None:
                index = self._wait_for_a_group(order)
            if self.keep_choice and not any(owner.down):
                self.by_queue[queue] = index  # its own group: until one goes down
        buffered = self.buffers[index]
        buffered.append(job)
        if len(buffered) >= CHUNK:
            self._feed(index)

    def _route_again(self) -> None:
        again, self.again = self.again, []
        for job in again:
            self._route(job)

    def _wait_for_a_group(self, order: list[int]) -> int:
        """Every group is down: wait ``SEND_TIMEOUT`` for one to be connected again."""
        owner = self.owner
        deadline = time.monotonic() + owner.send_timeout
        while time.monotonic() < deadline:
            for index in order:
                if owner._up(index):
                    return index
            time.sleep(ALL_DOWN_POLL)
        raise BrokerUnavailable(
            f"no router of any group of {owner.addr} was connected within "
            f"SEND_TIMEOUT={owner.send_timeout:g}s (is emq_router running?); "
            f"{sum(len(o) for o in self.unanswered) + len(self.again)} job(s) unacknowledged: "
            "sending them again with the same msgids is safe"
        )

    def _pipeline(self, index: int) -> bulk.Pipeline:
        sender = self.pipelines[index]
        if sender is not None:
            return sender
        client = self.owner.clients[index]
        if client.handshake.unsent:
            try:
                client.ask_features(wait=True)
            except BrokerUnavailable:
                raise _GroupDown(index) from None
        unanswered = self.unanswered[index]

        def answered(msgid: bytes) -> None:
            unanswered.pop(msgid, None)

        sender = bulk.Pipeline(
            client.channel,
            addr=client.addr,
            handshake=client.handshake,
            on_other=client.inbox.file,
            on_reject=self.result.reject,
            on_answer=answered,
            on_wait=lambda: self._check(index),
            **self.options,
        )
        self.pipelines[index] = sender
        self.lost_since[index] = None
        return sender

    def _feed(self, index: int) -> None:
        jobs, self.buffers[index] = self.buffers[index], []
        unanswered = self.unanswered[index]
        for job in jobs:
            unanswered[job[0]] = job
        try:
            self._pipeline(index).send_requests(jobs)
        except _GroupDown:
            self._drop(index)

    def _check(self, index: int) -> None:
        """While a group's pipeline waits: no router of it for ``SEND_TIMEOUT`` ends it."""
        if self.owner.clients[index].channel.peer_connected():
            self.lost_since[index] = None
            return
        now = time.monotonic()
        since = self.lost_since[index]
        if since is None:
            self.lost_since[index] = now
        elif now - since > self.owner.send_timeout:
            raise _GroupDown(index)

    def _drop(self, index: int) -> None:
        """Group ``index`` has had no router for ``SEND_TIMEOUT``: what it owes goes elsewhere."""
        owner = self.owner
        sender = self.pipelines[index]
        self.pipelines[index] = None
        if sender is not None:
            self.finished.append(sender)
        self.by_queue.clear()
        unanswered = list(self.unanswered[index].values()) + self.buffers[index]
        self.unanswered[index] = {}
        self.buffers[index] = []
        owner._mark_down(
            index,
            f"no router connected for SEND_TIMEOUT={owner.send_timeout:g}s; "
            f"{len(unanswered)} unacknowledged job(s) sent to another group with the same msgids",
        )
        owner.clients[index].ask_features()  # whoever serves it next is asked again
        for job in unanswered:
            queue = job[1].decode()
            self.moved[queue] = self.moved.get(queue, 0) + 1
        self.again.extend(unanswered)

    def _result(self) -> bulk.SendResult:
        result = self.result
        for sender in [p for p in self.pipelines if p is not None] + self.finished:
            for queue, counts in sender.counts.items():
                result.counts.setdefault(queue, bulk.QueueCounts()).merge(counts)
            result.batches += sender.batches_sent
        # A job moved to another group was counted as sent by both: once is a resend.
        for queue, moved in self.moved.items():
            counts = result.counts[queue]
            counts.sent -= moved
            counts.resent += moved
        return result
