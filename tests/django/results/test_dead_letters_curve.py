"""The poisoned-job admin commands go through the router's admin socket like STATUS does:
with CURVE only a key in CURVE_ADMIN_CLIENTS gets them answered; the dead-letter page
says why a router refused it (a router process with CURVE on)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from django_eventmq.errors import BrokerUnavailable
from django_eventmq.protocol import constants as C
from django_eventmq.runtime import admin_client
from tests.django.curve_router import curve_router
from tests.keys import Keys
from tests.keys import keys as keys


@pytest.fixture(scope="module")
def router(keys: Keys, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A CURVE router process; yields its admin address."""
    journal: Path = tmp_path_factory.mktemp("journal") / "journal.sqlite3"
    with curve_router(keys, journal) as (admin, _proc):
        yield admin


@pytest.mark.parametrize("command", [C.POISONED_RETRY, C.POISONED_PURGE])
def test_only_an_admin_key_gets_the_poisoned_job_commands_answered(
    keys: Keys, router: str, command: str
) -> None:
    admitted = admin_client.act_on_poisoned(
        router, command, ["m-1"], 10.0, settings=keys.peer_settings(keys.admin)
    )
    assert admitted == []  # answered: nothing of that msgid is poisoned there
    with pytest.raises(BrokerUnavailable, match="CURVE_ADMIN_CLIENTS"):
        admin_client.act_on_poisoned(
            router, command, ["m-1"], 10.0, settings=keys.peer_settings(keys.stranger)
        )


@pytest.mark.django_db
def test_the_page_says_a_router_refused_the_sites_key(
    keys: Keys, router: str, admin_client: Any, eventmq_settings: Any
) -> None:
    eventmq_settings(
        ADMIN_ADDR=router,
        CURVE_SERVER_PUBLIC_KEY=keys.server[0],
        CURVE_ADMIN_SECRET_KEY=keys.stranger[1],
    )
    page = admin_client.get("/admin/django_eventmq/deadletter/").content.decode()
    assert "Could not read the poisoned jobs of a router" in page
    assert "add that public key to the router&#x27;s CURVE_ADMIN_CLIENTS" in page
    eventmq_settings(
        ADMIN_ADDR=router,
        CURVE_SERVER_PUBLIC_KEY=keys.server[0],
        CURVE_ADMIN_SECRET_KEY=keys.admin[1],
    )
    page = admin_client.get("/admin/django_eventmq/deadletter/").content.decode()
    assert "Poisoned jobs held by the routers (0)" in page and "Could not read" not in page
