"""The routers a peer may talk to: groups of addresses, read in one place.

``BROKER_ADDR`` (clients, schedulers: the routers' frontends) and
``WORKER_ADDR`` (job managers: the routers' backends) name one router, the
members of a router group separated by commas, e.g.
``"tcp://10.0.0.1:47291,tcp://10.0.0.2:47291"``, or several groups (shards,
each with its own leader and journal) separated by semicolons, e.g.
``"tcp://a:47291,tcp://b:47291;tcp://c:47291,tcp://d:47291"``.

Only the leader of a group binds its sockets, so a peer connected to every
member of a group reaches the one that is up. :func:`parse_groups` checks the
whole value and returns the groups; :func:`parse_addresses` every member of
every group (one group: today's list). :class:`AddressCycle` is how a job
manager or a scheduler, which must talk to exactly one router of a group at a
time, walks the group. :class:`ShardChooser` decides which group a client's
job goes to first. Pure: no sockets, no clock.
"""

from __future__ import annotations

import itertools
import re
import zlib
from collections.abc import Sequence

from django_eventmq.errors import ConfigurationError

__all__ = [
    "HANDSHAKE_WAIT",
    "SHARD_BY_CHOICES",
    "AddressCycle",
    "ShardChooser",
    "check_shard_by",
    "parse_addresses",
    "parse_groups",
    "shard_of_queue",
]

#: Seconds a job manager or scheduler with several addresses waits for the ACK
#: of its INFORM before it tries the next address (a standby binds nothing, so
#: no connection is made there and no ACK comes). A single address keeps the
#: heartbeat timeout: there is nowhere else to go.
HANDSHAKE_WAIT = 1.5

# A peer connects, so a port must be a number (a router may bind "*").
_ADDRESS = re.compile(r"^(tcp://([^\s:/,\[\]]+|\[[0-9a-fA-F:.]+\]):\d{1,5}|ipc://[^\s,]+)$")
_EXAMPLE = "e.g. 'tcp://10.0.0.1:47291,tcp://10.0.0.2:47291' or 'ipc:///run/eventmq.sock'"
_GROUPS_EXAMPLE = "e.g. 'tcp://a:47291,tcp://b:47291;tcp://c:47291,tcp://d:47291'"

#: How a client spreads jobs over several groups (``SHARD_BY``): ``"queue"``
#: sends every job of a queue to the same group (a stable hash of its name), so
#: a queue's order is kept within that group; ``"round_robin"`` takes the
#: groups in turn, job after job. Either way a group that is down is skipped.
SHARD_BY_QUEUE = "queue"
SHARD_BY_ROUND_ROBIN = "round_robin"
SHARD_BY_CHOICES = (SHARD_BY_QUEUE, SHARD_BY_ROUND_ROBIN)


def parse_groups(value: str | Sequence[str], setting: str) -> tuple[tuple[str, ...], ...]:
    """The groups of ``value`` (``"a,b;c,d"``), each a tuple of its members, in order.

    A value without ``;`` is one group (:func:`parse_addresses` of it). An empty
    group, or an address listed in two groups, raises a
    :class:`ConfigurationError` naming ``setting`` and how to write it.
    """
    if not isinstance(value, str) or ";" not in value:
        return (_parse_members(value, setting),)
    groups: list[tuple[str, ...]] = []
    seen: dict[str, int] = {}
    for number, text in enumerate(value.split(";"), 1):
        if not text.strip():
            raise ConfigurationError(
                f"{setting}: group {number} of {value!r} is empty (a stray ';'?); separate "
                f"groups with single semicolons and a group's members with commas, "
                f"{_GROUPS_EXAMPLE}"
            )
        members = _parse_members(text, setting)
        for address in members:
            if address in seen:
                raise ConfigurationError(
                    f"{setting}: {address!r} is in group {seen[address]} and in group "
                    f"{number} of {value!r}; a router belongs to one group, name it once"
                )
            seen[address] = number
        groups.append(members)
    return tuple(groups)


def parse_addresses(value: str | Sequence[str], setting: str) -> tuple[str, ...]:
    """The addresses in ``value`` (``"a,b"``, a list, or groups ``"a,b;c,d"``), in order,
    each checked: every member of every group (see :func:`parse_groups`).

    ``setting`` (``"BROKER_ADDR"``, ``"WORKER_ADDR"``) is named in the
    :class:`ConfigurationError` an empty, malformed or repeated element raises.
    """
    return tuple(itertools.chain.from_iterable(parse_groups(value, setting)))


def _parse_members(value: str | Sequence[str], setting: str) -> tuple[str, ...]:
    """The members of one group (``"a,b"`` or a list), in order, each checked."""
    parts = value.split(",") if isinstance(value, str) else list(value)
    if not parts or parts == [""]:
        raise ConfigurationError(f"{setting} is empty: name the router's address, {_EXAMPLE}")
    seen: list[str] = []
    for number, raw in enumerate(parts, 1):
        if not isinstance(raw, str):
            raise ConfigurationError(
                f"{setting}: element {number} is {raw!r}, not a string; write the "
                f"addresses as one string separated by commas, {_EXAMPLE}"
            )
        address = raw.strip()
        if not address:
            raise ConfigurationError(
                f"{setting}: element {number} of {value!r} is empty (a stray comma?); "
                f"separate addresses with single commas, {_EXAMPLE}"
            )
        if not _ADDRESS.match(address):
            raise ConfigurationError(
                f"{setting}: {address!r} (element {number} of {value!r}) is not a tcp:// "
                f"address with a port or an ipc:// path; use {_EXAMPLE}"
            )
        if address in seen:
            raise ConfigurationError(
                f"{setting}: {address!r} is listed twice in {value!r}; name each router once"
            )
        seen.append(address)
    return tuple(seen)


class AddressCycle:
    """One address at a time out of a list, moving on to the next when told.

    A job manager or scheduler talks to exactly one router at a time: a
    DEALER connected to two live routers would share its messages between
    them. So it connects to :attr:`current`, and calls :meth:`advance` when that
    router does not answer or goes silent.
    """

    def __init__(self, addresses: Sequence[str]) -> None:
        if not addresses:
            raise ConfigurationError("a peer needs at least one router address")
        self.addresses = tuple(addresses)
        self._index = 0

    @property
    def current(self) -> str:
        """The address to connect to now."""
        return self.addresses[self._index]

    @property
    def several(self) -> bool:
        """More than one address: an address that does not answer is left for the next."""
        return len(self.addresses) > 1

    @property
    def label(self) -> str:
        """All the addresses, for log lines."""
        return ",".join(self.addresses)

    def advance(self) -> str:
        """Move to the next address (after the last, the first again); returns it."""
        self._index = (self._index + 1) % len(self.addresses)
        return self.current

    def handshake_wait(self, heartbeat_timeout: float) -> float:
        """Seconds to wait for the ACK of an INFORM before giving up on :attr:`current`."""
        if not self.several:
            return heartbeat_timeout
        return min(HANDSHAKE_WAIT, heartbeat_timeout)


def check_shard_by(value: object, setting: str = "SHARD_BY") -> str:
    """``value`` if it is one of :data:`SHARD_BY_CHOICES`; else a :class:`ConfigurationError`."""
    if value not in SHARD_BY_CHOICES:
        raise ConfigurationError(
            f"{setting}: {value!r} is not a way to spread jobs over router groups; use "
            f"'{SHARD_BY_QUEUE}' (every job of a queue to the same group, its order kept) "
            f"or '{SHARD_BY_ROUND_ROBIN}' (the groups in turn)"
        )
    return str(value)


def shard_of_queue(queue: str | bytes, groups: int) -> int:
    """The group (0-based, of ``groups``) the jobs of ``queue`` go to first.

    CRC-32 of the name: the same in every process and on every host (Python's
    ``hash()`` of a string changes from process to process).
    """
    name = queue.encode() if isinstance(queue, str) else queue
    return zlib.crc32(name) % groups


class ShardChooser:
    """The order in which a client tries the groups for a job.

    The first group is the job's own (by queue, or the next in turn); the
    others follow in ring order, so when a group is down its jobs all go to
    the same next group (by queue: a queue's jobs still go to one group).
    """

    def __init__(self, groups: int, shard_by: str = SHARD_BY_QUEUE) -> None:
        if groups < 1:
            raise ConfigurationError("a client needs at least one router group")
        self.groups = groups
        self.shard_by = check_shard_by(shard_by)
        self._turn = 0

    def first(self, queue: str | bytes) -> int:
        """The group a job of ``queue`` goes to when every group is up."""
        if self.groups == 1:
            return 0
        if self.shard_by == SHARD_BY_QUEUE:
            return shard_of_queue(queue, self.groups)
        turn = self._turn
        self._turn = (turn + 1) % self.groups
        return turn

    def order(self, queue: str | bytes) -> list[int]:
        """Every group, the job's own first, then the next ones in ring order."""
        first = self.first(queue)
        n = self.groups
        return [(first + step) % n for step in range(n)]
