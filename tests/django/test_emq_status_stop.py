"""``manage.py emq_status --stop`` against a router without CURVE: with the router's
admin token (read from the file it wrote) the router stops; a site whose
ADMIN_TOKEN_FILE names another file is refused with a clear error, and the router
keeps running."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from tests.router.test_router import Harness


def test_emq_status_stop_sends_the_token_and_is_refused_without_it(
    start_router: Callable[..., Harness], eventmq_settings: Callable[..., Any], tmp_path: Path
) -> None:
    h = start_router()
    admin = h.router.admin_address
    eventmq_settings(ADMIN_ADDR=admin, ADMIN_TOKEN_FILE=str(tmp_path / "other.token"))
    with pytest.raises(CommandError, match=r"refused DISCONNECT without the admin token"):
        call_command("emq_status", stop=True, timeout=10.0, stdout=io.StringIO())
    assert h.thread.is_alive() and "inflight_messages_by_queue" in h.ask("STATUS")
    eventmq_settings(ADMIN_ADDR=admin)  # the router's own file (the default place)
    out = io.StringIO()
    call_command("emq_status", stop=True, timeout=10.0, stdout=out)
    assert f"router at {admin} is stopping" in out.getvalue()
    h.thread.join(10)
    assert not h.thread.is_alive()
