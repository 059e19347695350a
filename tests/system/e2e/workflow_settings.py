"""Django settings of the workflow end-to-end processes: one SQLite file (``EMQ_WF_DB``)
for the client, the job managers' workers and the test, which reads it; or, with
``EMQ_WF_PG_NAME``, that PostgreSQL database on the test server."""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ["EMQ_WF_DB"],
        "OPTIONS": {"timeout": 30, "init_command": "PRAGMA journal_mode=WAL;"},
    }
}
if os.environ.get("EMQ_WF_PG_NAME"):
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ["EMQ_WF_PG_NAME"],
            "USER": os.environ.get("EMQ_TEST_PG_USER", "postgres"),
            "HOST": os.environ.get("EMQ_TEST_PG_HOST", "127.0.0.1"),
            "PORT": os.environ.get("EMQ_TEST_PG_PORT", "5432"),
        }
    }
EVENTMQ = {"JOB_MODULES": ["tests.system.e2e.workflow_jobs"]}
