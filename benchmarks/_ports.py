"""Free loopback TCP ports for the benchmarks' and the tests' processes.

Shared by ``benchmarks/`` and ``tests/`` (which re-exports it from
``tests.support``), so a benchmark class run inside the test suite picks its
ports the same safe way as the tests do.
"""

from __future__ import annotations

import os
import random
import socket

# Ports below the kernel's ephemeral range (32768-60999 on Linux), so the
# source port of some outgoing connection cannot take one between our pick
# and the process binding it; and never the same port twice in one run (the
# kernel happily hands a just-closed port out again: CI once gave a router
# the same port for its frontend and its admin socket).
# Under pytest-xdist each worker (PYTEST_XDIST_WORKER=gw0, gw1, ... of
# PYTEST_XDIST_WORKER_COUNT) picks from a slice of its own, so two workers never
# hand out the same port. "Never twice" holds within one process: a process a
# test starts (a benchmark script) draws from its worker's slice with a memory
# of its own, which is safe while the test does not hold a picked port unbound
# meanwhile (a picked port that is bound fails the bind check).
_PORTS_GIVEN: set[int] = set()


def _port_range(worker: str, count: str) -> tuple[int, int]:
    low, high = 20000, 32000
    if not worker.startswith("gw") or not count.isdigit():
        return low, high
    width = (high - low) // max(int(count), 1)
    # A worker xdist restarts gets the next number (gw3 of 3): it shares the last
    # slice rather than reaching into the ephemeral range.
    start = low + min(int(worker[2:]), max(int(count), 1) - 1) * width
    return start, start + width


_PORT_RANGE = _port_range(
    os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
)
_PORT_RNG = random.Random()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on and no earlier call returned."""
    for _ in range(1000):
        port = _PORT_RNG.randrange(*_PORT_RANGE)
        if port in _PORTS_GIVEN:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _PORTS_GIVEN.add(port)
        return port
    raise AssertionError(f"no free TCP port in {_PORT_RANGE} after 1000 tries")


def tcp_addr() -> str:
    """``tcp://127.0.0.1:PORT`` with a port from :func:`free_port`."""
    return f"tcp://127.0.0.1:{free_port()}"
