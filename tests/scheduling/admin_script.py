"""Drive the schedule admin from another process (for tests on a shared PostgreSQL database).

``python -m tests.scheduling.admin_script add '{"interval": 3600, ...}'`` creates a
schedule through the admin's add view and prints ``id=N``. ``edit N '{...}'``
logs in, prints ``ready``, waits for a line on stdin, then posts the change
form and prints ``edited``: the test times the edit from the moment it writes.
"""

from __future__ import annotations

import json
import sys

import django


def main(argv: list[str]) -> int:
    django.setup()
    from django.contrib.auth.models import User
    from django.test import Client
    from django.test.utils import setup_test_environment

    from django_eventmq.models import Schedule
    from tests.scheduling.admin_forms import schedule_form

    setup_test_environment()
    user, _ = User.objects.get_or_create(
        username="admin", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    command = argv[0]
    if command == "add":
        values = json.loads(argv[1])
        response = client.post("/admin/django_eventmq/schedule/add/", schedule_form(**values))
        if response.status_code != 302:
            print(response.content.decode()[:3000], file=sys.stderr)
            return 1
        print(f"id={Schedule.objects.latest('id').pk}", flush=True)
        return 0
    if command == "create":  # straight through the ORM, for bulk set-up
        ids = [Schedule.objects.create(**values).pk for values in json.loads(argv[1])]
        print("ids=" + ",".join(map(str, ids)), flush=True)
        return 0
    if command == "edit":
        row = Schedule.objects.get(pk=int(argv[1]))
        current = {
            "name": row.name,
            "enabled": row.enabled,
            "path": row.path,
            "callable": row.callable,
            "args": row.args,
            "kwargs": row.kwargs,
            "queue": row.queue,
            "headers": row.headers,
            "interval": row.interval or "",
            "cron": row.cron,
            "timezone": row.timezone,
            "nohaste": row.nohaste,
            "run_count": row.run_count or "",
        }
        current.update(json.loads(argv[2]))
        form = schedule_form(**current)
        print("ready", flush=True)
        sys.stdin.readline()
        response = client.post(f"/admin/django_eventmq/schedule/{row.pk}/change/", form)
        if response.status_code != 302:
            print(response.content.decode()[:3000], file=sys.stderr)
            return 1
        print("edited", flush=True)
        return 0
    print(f"unknown command {command!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
