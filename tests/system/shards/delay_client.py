"""A client process: ``python -m tests.system.shards.delay_client PREFIX COUNT Q1,Q2``.

Sends COUNT guaranteed jobs (``record(token)``, tokens PREFIX-0 ...) with
``Job.send()``, the path ``.delay()`` takes, over ``EMQ_BROKER_ADDR``, the
queues taken in turn; prints ``sent N`` at the end (a send that fails raises).
"""

from __future__ import annotations

import sys

from django_eventmq.protocol import Headers
from tests.system.chaos.jobs import record


def main() -> None:
    prefix, count, queues = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
    headers = Headers(guarantee=True)
    for n in range(count):
        token = f"{prefix}-{n}"
        record.send((token,), queue=queues[n % len(queues)], headers=headers, msgid=token)
    print(f"sent {count}", flush=True)


if __name__ == "__main__":
    main()
