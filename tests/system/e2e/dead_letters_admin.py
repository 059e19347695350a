"""Use the dead-letter admin page as a logged-in superuser, from a process of its own.

``python -m tests.system.e2e.dead_letters_admin COMMAND ...`` with the lifecycle
end-to-end settings (``DJANGO_SETTINGS_MODULE=tests.django.results.e2e_settings``,
the SQLite file real job managers record into; ``EMQ_BROKER_ADDR`` and
``EMQ_ADMIN_ADDR`` name the real router). Commands:

- ``list``: the dead-letter list page;
- ``retry MSGID``: the "retry" action on the dead letter of MSGID;
- ``poisoned retry|purge MSGID``: the poisoned-job buttons, for the router at ADMIN_ADDR.

Prints the HTTP status of the last response on the first line, then its HTML.
"""

from __future__ import annotations

import sys

import django

from tests.django.results.admin_page import staff_client

CHANGELIST = "/admin/django_eventmq/deadletter/"


def main(argv: list[str]) -> int:
    django.setup()
    from django_eventmq.models.dead_letters import DeadLetter
    from django_eventmq.runtime.config import get_settings

    client = staff_client()
    command, *rest = argv
    if command == "list":
        response = client.get(CHANGELIST)
    elif command == "retry":
        letter = DeadLetter.objects.get(msgid=rest[0])
        form = {"action": "retry", "_selected_action": [letter.pk]}
        response = client.post(CHANGELIST, form, follow=True)
    else:
        choice = f"{get_settings().admin_addr} {rest[1]}"
        response = client.post(
            CHANGELIST + "poisoned/", {"do": rest[0], "job": [choice]}, follow=True
        )
    print(response.status_code)
    print(response.content.decode())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
