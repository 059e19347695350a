"""Print the admin change page of one job result, as a logged-in staff user sees it.

``python -m tests.django.results.admin_page MSGID`` with the lifecycle end-to-end
settings (``DJANGO_SETTINGS_MODULE=tests.django.results.e2e_settings``): the page
of the row a real job manager recorded in the shared SQLite file. Prints the
HTTP status on the first line, then the HTML.
"""

from __future__ import annotations

import sys

import django


def main(argv: list[str]) -> int:
    django.setup()
    from django.contrib.auth.models import User
    from django.test import Client
    from django.test.utils import setup_test_environment

    from django_eventmq.models.results import JobResult

    setup_test_environment()  # lets the test client's host through ALLOWED_HOSTS
    user, _ = User.objects.get_or_create(
        username="staff", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    row = JobResult.objects.get(msgid=argv[0])
    response = client.get(f"/admin/django_eventmq/jobresult/{row.pk}/change/")
    print(response.status_code)
    print(response.content.decode())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
