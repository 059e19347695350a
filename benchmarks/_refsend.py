"""Send N no-op jobs with the REFERENCE client (run as a subprocess by throughput.py).

Prints one JSON line: wall-clock ``start``/``end`` of the sends and the count.
Jobs ask for a reply: the reference router logs ``Completed default job`` for
each REPLY, which is how throughput.py sees completion.
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--addr", required=True)
    parser.add_argument("--jobs", type=int, required=True)
    options = parser.parse_args()

    from eventmq.client.messages import defer_job  # type: ignore[import-untyped]
    from eventmq.sender import Sender  # type: ignore[import-untyped]

    sender = Sender()
    sender.connect(options.addr)
    start = time.time()
    for i in range(options.jobs):
        defer_job(sender, "benchmarks.noop_jobs.ref_noop", args=[i], reply_requested=True)
    end = time.time()
    print(json.dumps({"start": start, "end": end, "jobs": options.jobs}), flush=True)
    sender.zsocket.close(linger=2000)  # let the last messages leave


if __name__ == "__main__":
    main()
