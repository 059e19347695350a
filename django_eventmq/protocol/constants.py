"""Protocol constants for eMQP/1.0: command names, peer types, defaults.

Everything the wire format names lives here once. Byte forms are kept next to
the text forms because the hot paths compare frames without decoding them.
"""

from __future__ import annotations

from typing import Final

#: Version frame of every eMQP/1.0 message.
PROTOCOL_VERSION: Final = "eMQP/1.0"
PROTOCOL_VERSION_B: Final = PROTOCOL_VERSION.encode()

# Commands of the spec (seeds/000) ...
ACK: Final = "ACK"
REPLY: Final = "REPLY"
HEARTBEAT: Final = "HEARTBEAT"
DISCONNECT: Final = "DISCONNECT"
KBAI: Final = "KBAI"
REQUEST: Final = "REQUEST"
PUBLISH: Final = "PUBLISH"
SCHEDULE: Final = "SCHEDULE"
UNSCHEDULE: Final = "UNSCHEDULE"
INFORM: Final = "INFORM"
READY: Final = "READY"
# ... the reference's spelling of KBAI, accepted on input ...
KBYE: Final = "KBYE"
# ... and the administrative commands the reference router answers.
STATUS: Final = "STATUS"
ROUTER_SHOW_WORKERS: Final = "ROUTER_SHOW_WORKERS"
ROUTER_SHOW_SCHEDULERS: Final = "ROUTER_SHOW_SCHEDULERS"

#: Byte forms of the commands the hot paths compare frames with, without decoding
#: them (the text forms of our extensions live in .extensions and .batch; a test
#: checks that both spellings agree).
ACK_B: Final = ACK.encode()
REQUEST_B: Final = REQUEST.encode()
READY_B: Final = READY.encode()
DONE_B: Final = b"DONE"
BATCH_B: Final = b"BATCH"

#: Ours: the journal's state (queued, in flight, store size, syncs, ...), like PZQ's MONITOR.
MONITOR: Final = "MONITOR"

#: Ours: the jobs handed out to job managers now (running or prefetched), one row each.
ROUTER_SHOW_JOBS: Final = "ROUTER_SHOW_JOBS"

#: Ours: hand poisoned jobs out again (deaths reset) / delete them from the journal.
#: Their frames after the msgid are the msgids of the jobs.
POISONED_RETRY: Final = "POISONED_RETRY"
POISONED_PURGE: Final = "POISONED_PURGE"

#: On the admin socket DISCONNECT stops the router: it is an admin command there.
ADMIN_COMMANDS: Final = frozenset(
    {
        STATUS,
        ROUTER_SHOW_WORKERS,
        ROUTER_SHOW_SCHEDULERS,
        ROUTER_SHOW_JOBS,
        MONITOR,
        POISONED_RETRY,
        POISONED_PURGE,
        DISCONNECT,
    }
)
#: The admin commands that change the router. Without CURVE they must carry the
#: router's admin token (docs/security.md); the others only read.
ADMIN_STATE_CHANGING: Final = frozenset({DISCONNECT, POISONED_RETRY, POISONED_PURGE})
#: Ours: an admin command's first frame after the msgid, when it starts with this,
#: is the admin token (the rest of the frame), not an argument.
ADMIN_TOKEN_PREFIX: Final = "admin-token:"  # noqa: S105 - a frame's label, no secret

#: Peer types named in the last frame of INFORM.
PEER_WORKER: Final = "worker"
PEER_SCHEDULER: Final = "scheduler"
PEER_TYPES: Final = frozenset({PEER_WORKER, PEER_SCHEDULER})

#: The reference's default addresses; ours match so the two can swap.
DEFAULT_FRONTEND_ADDR: Final = "tcp://127.0.0.1:47291"
DEFAULT_BACKEND_ADDR: Final = "tcp://127.0.0.1:47290"
DEFAULT_ADMIN_ADDR: Final = "tcp://127.0.0.1:47293"
DEFAULT_PUBLISHER_INCOMING_ADDR: Final = "tcp://127.0.0.1:47298"
DEFAULT_PUBLISHER_OUTGOING_ADDR: Final = "tcp://127.0.0.1:47299"

DEFAULT_QUEUE_NAME: Final = "default"
DEFAULT_QUEUE_WEIGHT: Final = 10

#: Seconds between heartbeats, and of silence after which a peer is dead.
HEARTBEAT_INTERVAL: Final = 3.0
HEARTBEAT_TIMEOUT: Final = 5.0

#: Job body verb: ``["run", {...}]``.
JOB_VERB_RUN: Final = "run"
