"""Django settings of the lifecycle end-to-end processes: one SQLite file shared by all."""

from __future__ import annotations

import importlib.util
import os

from tests.settings import *  # noqa: F403

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ["EMQ_LIFECYCLE_DB"],
        "OPTIONS": {"timeout": 30, "init_command": "PRAGMA journal_mode=WAL;"},
    }
}
TASKS = {
    "default": {
        "BACKEND": "django_eventmq.tasks_backend.EventMQBackend",
        "QUEUES": ["default"],
    }
}
# tests.django.results.tasks holds Django @task functions: only where django.tasks exists (6.0+).
_HAS_TASKS = importlib.util.find_spec("django.tasks") is not None
EVENTMQ = {
    "JOB_MODULES": [
        "tests.django.results.jobs",
        *(["tests.django.results.tasks"] if _HAS_TASKS else []),
    ]
}
