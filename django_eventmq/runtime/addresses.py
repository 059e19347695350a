"""The routers a peer may talk to: a comma-separated list of addresses, read in one place.

``BROKER_ADDR`` (clients, schedulers: the routers' frontends) and
``WORKER_ADDR`` (job managers: the routers' backends) name one router or the
members of a router group, e.g. ``"tcp://10.0.0.1:47291,tcp://10.0.0.2:47291"``.
Only the leader of a group binds its sockets, so a peer connected to every
member reaches the one that is up. :func:`parse_addresses` checks such a list;
:class:`AddressCycle` is how a job manager or a scheduler, which must talk to
exactly one router at a time, walks it. Pure: no sockets, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from django_eventmq.errors import ConfigurationError

__all__ = ["HANDSHAKE_WAIT", "AddressCycle", "parse_addresses"]

#: Seconds a job manager or scheduler with several addresses waits for the ACK
#: of its INFORM before it tries the next address (a standby binds nothing, so
#: no connection is made there and no ACK comes). A single address keeps the
#: heartbeat timeout: there is nowhere else to go.
HANDSHAKE_WAIT = 1.5

# A peer connects, so a port must be a number (a router may bind "*").
_ADDRESS = re.compile(r"^(tcp://([^\s:/,\[\]]+|\[[0-9a-fA-F:.]+\]):\d{1,5}|ipc://[^\s,]+)$")
_EXAMPLE = "e.g. 'tcp://10.0.0.1:47291,tcp://10.0.0.2:47291' or 'ipc:///run/eventmq.sock'"


def parse_addresses(value: str | Sequence[str], setting: str) -> tuple[str, ...]:
    """The addresses in ``value`` (``"a,b"`` or a list), in order, each checked.

    ``setting`` (``"BROKER_ADDR"``, ``"WORKER_ADDR"``) is named in the
    :class:`ConfigurationError` an empty, malformed or repeated element raises.
    """
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
