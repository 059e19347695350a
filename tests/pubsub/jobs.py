"""A job that publishes an event (run by a real job manager in the tests)."""

from __future__ import annotations

from typing import Any

from django_eventmq import job, publish


@job
def announce(topic: str, data: Any) -> str:
    return publish(topic, data)
