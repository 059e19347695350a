"""Publish one event with the REFERENCE client (eventmq 0.3.13) and exit.

Run in a subprocess (``python -m tests.pubsub.reference_publish ...``) so the
reference's import side effects stay out of pytest. Uses its ``Sender`` (a
DEALER) and ``send_publish_request``, which send ``PUBLISH, MSGID, TOPIC, JSON``.
Prints ``{"sent": MSGID}``.
"""

from __future__ import annotations

import argparse
import json
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--addr", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--data", default="null", help="JSON")
    options = parser.parse_args()

    from eventmq.client.messages import send_publish_request  # type: ignore[import-untyped]
    from eventmq.sender import Sender  # type: ignore[import-untyped]

    sender = Sender()
    sender.connect(options.addr)
    msgid = send_publish_request(sender, options.topic, json.loads(options.data))
    print(json.dumps({"sent": msgid}), flush=True)
    # Let the event go out before exiting: closing with a linger and ending
    # the context waits for it.
    sender.zsocket.close(linger=5000)
    sender.zcontext.term()
    return 0 if msgid else 1


if __name__ == "__main__":
    sys.exit(main())
