"""Without ``django.tasks`` (Django 5.2) the rest of the app still works."""

from __future__ import annotations

import subprocess
import sys

from tests.support import ROOT

# Importing django.tasks fails as on Django 5.2, then the app is set up and used.
SCRIPT = """
import sys
sys.modules["django.tasks"] = None
import django
django.setup()
from django.core.management import call_command
from django_eventmq import admin, results, worker_hooks
from django_eventmq.client.handles import JobHandle
worker_hooks.setup()  # no dispatcher to register, no tasks to discover, no error
call_command("migrate", verbosity=0)
worker_hooks.record_results([{"msgid": "m", "status": "succeeded", "value": 1, "attempt": 1}])
assert JobHandle("m").result == 1
call_command("check")
try:
    import django_eventmq.tasks_backend
except ImportError:
    print("tasks backend unavailable, rest ok")
"""


def test_the_app_works_without_django_tasks():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env={"DJANGO_SETTINGS_MODULE": "tests.settings", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "tasks backend unavailable, rest ok" in done.stdout
