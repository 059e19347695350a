"""Helpers for job manager tests: settings for a fake router, a job manager in a thread."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django_eventmq.jobmanager.manager import JobManager
from django_eventmq.protocol import Done, Reply
from django_eventmq.runtime.settings import Settings
from tests.fake_router import SAMPLE, FakeRouter


def settings_for(router: FakeRouter, **options: Any) -> Settings:
    values: dict[str, Any] = {
        "worker_addr": router.addr,
        "concurrency": 2,
        "prefetch": 0,
        "job_modules": (SAMPLE,),
        "shutdown_grace": 5.0,
    }
    values.update(options)
    return Settings(**values)


@contextmanager
def running(settings: Settings, hooks: str | None = None) -> Iterator[JobManager]:
    """A job manager serving in a thread of this process (its workers are processes)."""
    jm = JobManager(settings, hooks=hooks, name="test-jm")
    thread = threading.Thread(target=jm.run, daemon=True)
    thread.start()
    try:
        yield jm
    finally:
        jm.stop()
        thread.join(20)
        assert not thread.is_alive()


def payload(message: Reply | Done) -> Any:
    return json.loads(message.payload)
