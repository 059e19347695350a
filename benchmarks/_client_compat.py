"""The client calls the benchmarks need, in this tree or in an older one.

``benchmarks/versus.py`` runs this checkout's benchmarks against an earlier
commit's package: the per-thread clients moved from ``client/connection.py``
to ``client/pool.py`` in issue 31, so the benchmarks find them in either.
"""

from __future__ import annotations


def close_clients() -> None:
    """Close this process's client sockets (``client.pool``, or before it ``client.connection``)."""
    try:
        from django_eventmq.client.pool import close_clients as close
    except ImportError:  # a tree from before client/pool.py
        from django_eventmq.client.connection import close_clients as close  # type: ignore[attr-defined,no-redef]
    close()
