"""POST data for the schedule admin's add and change views (shared by the tests and a script)."""

from __future__ import annotations

import json
from typing import Any


def schedule_form(**values: Any) -> dict[str, str]:
    """Form data as a browser sends it: booleans only when checked, JSON as text."""
    data: dict[str, Any] = {
        "name": "",
        "enabled": True,
        "path": "tests.scheduling.jobs",
        "callable": "touch",
        "args": [],
        "kwargs": {},
        "queue": "default",
        "headers": "",
        "interval": "",
        "cron": "",
        "timezone": "UTC",
        "nohaste": False,
        "run_count": "",
    }
    data.update(values)
    form: dict[str, str] = {}
    for key, value in data.items():
        if isinstance(value, bool):
            if value:
                form[key] = "on"
        elif isinstance(value, list | dict):
            form[key] = json.dumps(value)
        else:
            form[key] = "" if value is None else str(value)
    return form
