"""``tests.settings`` with its database in a file (``EMQ_TEST_SQLITE``), for commands run
as subprocesses that must see the same rows as the test."""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403

DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["EMQ_TEST_SQLITE"]}
}
