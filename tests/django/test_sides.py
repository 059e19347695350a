"""A web process loads none of the code that only workers or the scheduler run.

The glue modules that two processes use are split by side (``results`` /
``result_recording``, ``tasks_backend`` / ``tasks_runner``, ``workflows`` /
``workflow_steps``, ``dead_letters`` / ``dead_letter_recording``, ``outbox`` /
``schedule_database``): a fresh interpreter with the app set up, as a web
process has it, imports the web side and must not find the other side loaded.
"""

from __future__ import annotations

import json
import sys

from tests.support import ROOT, run_checked

#: Modules that only a worker child, a job manager, a router or the scheduler runs.
NOT_IN_THE_WEB = (
    "django_eventmq.tasks_runner",
    "django_eventmq.workflow_steps",
    "django_eventmq.dead_letter_recording",
    "django_eventmq.schedule_database",
    "django_eventmq.scheduling.scheduler",
    "django_eventmq.scheduling.relay",
    "django_eventmq.jobmanager.invoke",
    "django_eventmq.jobmanager.manager",
    "django_eventmq.router.router",
)

SCRIPT = """
import json, sys
import django
django.setup()  # the admin, as a web process loads it
import django_eventmq.results, django_eventmq.workflows, django_eventmq.outbox
import django_eventmq.dead_letters, django_eventmq.hooks
reading = "django_eventmq.result_recording" in sys.modules
import django_eventmq.tasks_backend
print(json.dumps({"reading_loads_recording": reading, "modules": sorted(sys.modules)}))
"""


def test_the_web_side_loads_no_worker_or_scheduler_code():
    out = run_checked(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env={"DJANGO_SETTINGS_MODULE": "tests.settings", "PATH": "/usr/bin:/bin"},
    )
    found = json.loads(out)
    assert "django_eventmq.workflows" in found["modules"]  # the script did import
    assert [name for name in NOT_IN_THE_WEB if name in found["modules"]] == []
    # Reading results (handle.status, the admin) loads no upsert; the Tasks
    # backend writes its queued rows, so it does.
    assert found["reading_loads_recording"] is False
