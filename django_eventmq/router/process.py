"""The router process that ``emq_router`` and ``python -m django_eventmq router`` run.

A plain router, or one member of a router group when the settings name a
PostgreSQL journal (``JOURNAL_URL``). Each front end calls
:func:`router_service` and runs what it returns.
"""

from __future__ import annotations

from django_eventmq.errors import ConfigurationError
from django_eventmq.runtime.service import Service
from django_eventmq.runtime.settings import Settings


def router_service(settings: Settings, *, journal_recover: bool = False) -> Service:
    """The router process: a plain router, or a router group's member (``JOURNAL_URL``)."""
    if settings.journal_url:
        if journal_recover:
            raise ConfigurationError(
                "--journal-recover salvages an SQLite journal file; a PostgreSQL journal "
                "(JOURNAL_URL) has nothing to salvage: drop the option"
            )
        from django_eventmq.router.group import GroupMember

        return GroupMember(settings)
    from django_eventmq.router.router import Router

    return Router(settings, journal_recover=journal_recover)
