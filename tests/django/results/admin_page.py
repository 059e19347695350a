"""Print the admin change page of one job result, as a logged-in staff user sees it.

``python -m tests.django.results.admin_page MSGID`` with the lifecycle end-to-end
settings (``DJANGO_SETTINGS_MODULE=tests.django.results.e2e_settings``): the page
of the row a real job manager recorded in the shared SQLite file. Prints the
HTTP status on the first line, then the HTML.
"""

from __future__ import annotations

import sys
from typing import Any

import django


def staff_client() -> Any:
    """A Django test client logged in as a superuser (``staff``, made if missing), in a
    process whose Django is set up; also for the other admin-page helper processes."""
    from django.contrib.auth.models import User
    from django.test import Client
    from django.test.utils import setup_test_environment

    setup_test_environment()  # lets the test client's host through ALLOWED_HOSTS
    user, _ = User.objects.get_or_create(
        username="staff", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    return client


def main(argv: list[str]) -> int:
    django.setup()
    from django_eventmq.models.results import JobResult

    client = staff_client()
    row = JobResult.objects.get(msgid=argv[0])
    response = client.get(f"/admin/django_eventmq/jobresult/{row.pk}/change/")
    print(response.status_code)
    print(response.content.decode())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
