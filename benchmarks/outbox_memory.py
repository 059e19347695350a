"""The router's memory with clients that never read what it sends them.

    .venv/bin/python benchmarks/outbox_memory.py                    # 8 clients x 150,000
    .venv/bin/python benchmarks/outbox_memory.py --clients 4 --messages 50000
    .venv/bin/python benchmarks/outbox_memory.py --budget 33554432   # EMQ_OUTBOX_BUDGET

A router process (journal on disk, no job manager) and ``--clients`` DEALER
sockets in this process that send REQUESTs and never read: each sends
``--messages`` REQUESTs cycling over 10 msgids, so the router stores 10 jobs
per client and ACKs every REQUEST (a duplicate is acknowledged again). The
ACKs pile up for the clients. After each ``--round`` REQUESTs per client the
script waits until the router has read them (MONITOR ``duplicates``), so what
grows is what the router sends. The router's RSS (psutil) is sampled after
each round and once the clients stopped; at the end one reading client must
still get its ACK. Printed: the peak and final RSS, and MONITOR's outbox keys.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import psutil
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._peers import Admin, Proc, our_command, tcp_addr, wait_until

V = b"eMQP/1.0"
BODY = json.dumps(
    ["run", {"path": "benchmarks.noop_jobs", "callable": "noop", "args": [], "kwargs": {}}]
).encode()
MIB = 1024 * 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--messages", type=int, default=150_000, help="REQUESTs per client")
    parser.add_argument("--budget", type=int, default=0, help="EMQ_OUTBOX_BUDGET (0: default)")
    parser.add_argument(
        "--round", type=int, default=1000, help="REQUESTs per client before waiting for the router"
    )
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="emq-outbox-"))
    frontend, backend, admin_addr = tcp_addr(), tcp_addr(), tcp_addr()
    env = {"EMQ_JOURNAL_PATH": str(workdir / "journal.sqlite3"), "EMQ_JOURNAL_SYNC": "normal"}
    if args.budget:
        env["EMQ_OUTBOX_BUDGET"] = str(args.budget)
    router = Proc(
        our_command("router", "--frontend", frontend, "--backend", backend, "--admin", admin_addr),
        env=env,
    )
    ctx = zmq.Context()
    admin = None
    try:
        router.wait_output("router ready", 30)
        process = psutil.Process(router.pid)
        admin = Admin(admin_addr)
        start_rss = process.memory_info().rss
        peers = []
        for i in range(args.clients):
            peer = ctx.socket(zmq.DEALER)
            peer.setsockopt(zmq.IDENTITY, f"silent-{i}".encode())
            peer.setsockopt(zmq.SNDHWM, 0)
            peer.setsockopt(zmq.LINGER, 0)
            peer.connect(frontend)
            peers.append(peer)
        peak = start_rss
        began = time.monotonic()
        for n in range(args.messages):
            msgid = b"silent-%d" % (n % 10)
            for i, peer in enumerate(peers):
                mid = b"%d-%s" % (i, msgid)
                peer.send_multipart([b"", V, b"REQUEST", mid, b"default", b"guarantee", BODY])
            if n % args.round == args.round - 1:
                # Paced: the router reads what was sent before more comes, so what
                # grows is what it sends (ACKs), not what waits to be read.
                sent = (n + 1) * len(peers)
                wait_until(
                    lambda sent=sent: admin.call("MONITOR")["duplicates"] >= sent - 10 * len(peers),
                    120,
                    "the router to read the REQUESTs",
                )
                peak = max(peak, process.memory_info().rss)
        sent_in = time.monotonic() - began
        # The router reads what is still queued for it; RSS until it stops growing.
        last = 0
        stable = 0
        while stable < 5:
            time.sleep(0.5)
            rss = process.memory_info().rss
            peak = max(peak, rss)
            stable = stable + 1 if abs(rss - last) < MIB else 0
            last = rss
        monitor = admin.call("MONITOR")
        reader = ctx.socket(zmq.DEALER)
        reader.setsockopt(zmq.LINGER, 0)
        reader.connect(frontend)
        reader.send_multipart([b"", V, b"REQUEST", b"reader-1", b"default", b"guarantee", BODY])
        answered = wait_until(lambda: reader.poll(100), 30, "the reading client's ACK")
        ack = reader.recv_multipart() if answered else []
        print(f"clients: {args.clients} x {args.messages} REQUESTs, read in {sent_in:.1f}s")
        print(f"router RSS: start {start_rss / MIB:.0f} MiB, peak {peak / MIB:.0f} MiB,")
        print(f"            after the clients stopped {last / MIB:.0f} MiB")
        outbox = {k: v for k, v in monitor.items() if k.startswith(("outbox", "clients_cut"))}
        print(f"MONITOR: {json.dumps(outbox)}")
        print(f"a reading client got: {ack[2:3]}")
        reader.close()
        for peer in peers:
            peer.close()
    finally:
        if admin is not None:
            admin.close()
        ctx.term()
        router.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
