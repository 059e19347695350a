"""A router process with CURVE on its sockets, for the admin tests that talk to one."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.keys import Keys
from tests.support import Proc, python_module, tcp_addr


@contextmanager
def curve_router(keys: Keys, journal: Path) -> Iterator[tuple[str, Proc]]:
    """A ready router (no job manager) that admits the client, worker and admin keys of
    ``keys``; yields (admin address, process) and stops it afterwards."""
    admin = tcp_addr()
    proc = Proc(
        python_module(
            "router", "--frontend", tcp_addr(), "--backend", tcp_addr(), "--admin", admin,
        ),
        env={
            "EMQ_CURVE_SERVER_SECRET_KEY": keys.server[1],
            "EMQ_CURVE_FRONTEND_CLIENTS": keys.client[0],
            "EMQ_CURVE_BACKEND_WORKERS": keys.worker[0],
            "EMQ_CURVE_ADMIN_CLIENTS": keys.admin[0],
            "EMQ_JOURNAL_PATH": str(journal),
        },
    )  # fmt: skip
    try:
        proc.wait_output(r"router ready")
        yield admin, proc
    finally:
        proc.stop()
