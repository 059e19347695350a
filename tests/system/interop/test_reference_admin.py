"""The reference eventmq 0.3.13's admin shell (``emq-cli``: ``connect ADDR``, then
``shutdown`` sends DISCONNECT with no token) against our router without CURVE: by
default it is refused and the router keeps running; with ADMIN_TOKEN_REQUIRED=false
(the compatibility setting) it stops the router, as it stops the reference's."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.router.test_crash import RouterProcess
from tests.support import ROOT, clean_environ
from tests.system.chaos.support import admin_call
from tests.system.interop.conftest import BIN, INTEROP

pytestmark = INTEROP


def reference_shutdown(admin: str) -> str:
    """``emq-cli``'s ``shutdown`` on ``admin``; what it printed."""
    done = subprocess.run(
        [str(BIN / "emq-cli")],
        input=f"connect {admin}\nshutdown\nquit\n",
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=clean_environ(),
        check=False,
    )
    return done.stdout + done.stderr


def test_the_reference_shell_cannot_stop_our_router_without_the_token(tmp_path: Path) -> None:
    r = RouterProcess(tmp_path)
    try:
        printed = reference_shutdown(r.admin)
        assert "refused" in printed and "without the admin token" in printed, printed
        assert r.proc.popen.poll() is None
        assert "inflight_messages_by_queue" in admin_call(r.admin, "STATUS")
    finally:
        r.stop()


def test_with_admin_token_required_off_the_reference_shell_stops_our_router(
    tmp_path: Path,
) -> None:
    r = RouterProcess(tmp_path, EMQ_ADMIN_TOKEN_REQUIRED="false")
    try:
        printed = reference_shutdown(r.admin)
        assert "ACK" in printed, printed
        assert r.proc.popen.wait(30) == 0
    finally:
        r.stop()
