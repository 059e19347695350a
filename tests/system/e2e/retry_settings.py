"""Django settings of the retry-policy end-to-end processes: one SQLite file shared by all."""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ["EMQ_RETRY_DB"],
        "OPTIONS": {"timeout": 30, "init_command": "PRAGMA journal_mode=WAL;"},
    }
}
EVENTMQ = {"JOB_MODULES": ["tests.system.e2e.retry_jobs"]}
