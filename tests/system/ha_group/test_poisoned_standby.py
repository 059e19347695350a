"""A router group's standby holds no journal: asked to retry or purge poisoned jobs, it
answers with its group status, which the admin client reports as an error naming the
leader to ask (a real member process standing by: PostgreSQL is out of its reach)."""

from __future__ import annotations

import pytest

from django_eventmq.errors import BrokerUnavailable
from django_eventmq.protocol import constants as C
from django_eventmq.runtime import admin_client
from tests.support import free_port
from tests.system.ha_group.support import Member


@pytest.mark.parametrize("command", [C.POISONED_RETRY, C.POISONED_PURGE])
def test_a_standby_does_not_act_on_poisoned_jobs_and_says_so(command: str) -> None:
    nowhere = f"postgresql://postgres@127.0.0.1:{free_port()}/test?connect_timeout=1"
    member = Member("lonely", nowhere, "tpoisoned", {"EMQ_HEARTBEAT_INTERVAL": "0.5"})
    try:
        assert member.status()["role"] == "standby"
        listed, total = admin_client.poisoned_jobs(member.admin)
        assert (listed, total) == ([], 0)
        with pytest.raises(BrokerUnavailable, match=r"standby .* ask the group's leader"):
            admin_client.act_on_poisoned(member.admin, command, ["m-1"])
    finally:
        member.proc.stop()
