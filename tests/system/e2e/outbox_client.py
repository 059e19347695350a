"""The sending process of the outbox tests: ``python -m tests.system.e2e.outbox_client
MODE LOG TAG``. In one transaction it creates the user ``TAG`` (the caller's own
write) and ``note.delay_on_commit(LOG, TAG)`` (an outbox job), printing the msgid
before the commit. MODE:

- ``send``: commits; the job is sent at the commit and its row deleted.
- ``kill``: an on_commit callback registered before the job's kills this process
  (SIGKILL) right after the commit, before the job's send.
- ``kill-before-delete``: the job is sent and acknowledged; the process is killed
  as it would delete the job's row (the row stays, the job was sent).
- ``rollback``: the transaction rolls back.
- ``plain``: ``note.delay(LOG, TAG)``, no transaction (the tests' last job).
"""

from __future__ import annotations

import os
import signal
import sys

import django


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main(mode: str, log: str, tag: str) -> None:
    django.setup()
    from django.contrib.auth.models import User
    from django.db import transaction

    from django_eventmq.outbox import TableOutbox
    from tests.system.e2e.outbox_jobs import note

    if mode == "plain":
        print(note.delay(log, tag), flush=True)
        return
    if mode == "kill-before-delete":
        TableOutbox.sent = lambda self, msgid: _kill()  # type: ignore[method-assign]

    class RolledBack(Exception):
        pass

    try:
        with transaction.atomic():
            User.objects.create(username=tag)
            if mode == "kill":
                transaction.on_commit(_kill)  # runs first: after the commit, before the send
            handle = note.delay_on_commit(log, tag)
            print(handle, flush=True)
            if mode == "rollback":
                raise RolledBack
    except RolledBack:
        print(handle.status, flush=True)
        return
    print("committed", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
