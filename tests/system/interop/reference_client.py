"""Send one job with the REFERENCE client (eventmq 0.3.13) and print what comes back.

Run in a subprocess (``python -m tests.system.interop.reference_client ...``) so the
reference's import side effects (logging set-up, settings) stay out of pytest.
Prints JSON lines: ``{"sent": MSGID}`` then ``{"frames": [...]}`` for every
message the reference Sender's socket receives within ``--listen`` seconds; it
stops early once a REPLY carrying a job result (``{"value": ...}``) arrived
when ``--until-result`` is given.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def _is_result(frames: list[str]) -> bool:
    """A REPLY whose body holds a job result (not just a receipt)."""
    if len(frames) < 5 or frames[2] != "REPLY":
        return False
    return any(frame.startswith("{") and '"value"' in frame for frame in frames[4:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--addr", required=True)
    parser.add_argument("--job", required=True, help="dotted path module.function")
    parser.add_argument("--args", default="[]", help="JSON list")
    parser.add_argument("--kwargs", default="{}", help="JSON object")
    parser.add_argument("--queue", default="default")
    parser.add_argument("--reply", action="store_true", help="reply-requested")
    parser.add_argument("--guarantee", action="store_true")
    parser.add_argument("--retry-count", type=int, default=0)
    parser.add_argument("--timeout", type=int, default=0)
    parser.add_argument("--listen", type=float, default=0.5, help="seconds to collect replies")
    parser.add_argument("--until-result", action="store_true")
    options = parser.parse_args()

    from eventmq.client.messages import defer_job  # type: ignore[import-untyped]
    from eventmq.sender import Sender  # type: ignore[import-untyped]

    sender = Sender()
    sender.connect(options.addr)
    msgid = defer_job(
        sender,
        options.job,
        args=json.loads(options.args),
        kwargs=json.loads(options.kwargs),
        queue=options.queue,
        reply_requested=options.reply,
        guarantee=options.guarantee,
        retry_count=options.retry_count,
        timeout=options.timeout,
    )
    print(json.dumps({"sent": msgid, "identity": str(sender.name)}), flush=True)
    deadline = time.monotonic() + options.listen
    socket = sender.zsocket
    while (left := deadline - time.monotonic()) > 0:
        if not socket.poll(int(left * 1000) + 1):
            break
        frames = [f.decode("utf-8", "replace") for f in socket.recv_multipart()]
        print(json.dumps({"frames": frames}), flush=True)
        if options.until_result and _is_result(frames):
            break
    socket.close(linger=0)
    return 0 if msgid else 1


if __name__ == "__main__":
    sys.exit(main())
