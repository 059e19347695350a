"""Django settings of the workflow end-to-end processes: one SQLite file (``EMQ_WF_DB``)
for the client, the job managers' workers and the test, which reads it."""

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
EVENTMQ = {"JOB_MODULES": ["tests.system.e2e.workflow_jobs"]}
