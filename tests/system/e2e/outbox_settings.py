"""Django settings of the outbox end-to-end processes: the workflow tests' databases
(one SQLite file, or a PostgreSQL database) with the outbox tests' jobs."""

from __future__ import annotations

from tests.system.e2e.workflow_settings import *  # noqa: F403

EVENTMQ = {"JOB_MODULES": ["tests.system.e2e.outbox_jobs"]}
