"""The ceiling: the least a Python job broker on pyzmq can do per job, no protocol logic.

Roles (each its own process, run by throughput.py as ``python -m benchmarks._ceiling ROLE``):

* ``broker FRONTEND BACKEND``: a ROUTER for clients and a ROUTER for workers;
  each worker announces CREDIT free slots once, and each reply frees one
  again; requests wait in a deque when no slot is free. One message per hop.
* ``worker BACKEND CREDIT``: a DEALER that echoes every request back (job =
  no-op). CREDIT 1 is the flow control of one READY per worker process (like
  eMQP); a large CREDIT pipelines, the transport's own limit.
* ``client FRONTEND N WINDOW``: sends N requests with at most WINDOW
  outstanding, receives N replies; prints round trips per second.
* ``push ADDR N`` / ``pull ADDR N``: one-way PUSH/PULL; pull prints messages/s.

Messages have the frame count and size of an eMQP REQUEST, so the copies and
syscalls match what a real job costs.
"""

from __future__ import annotations

import json
import sys
import time
from collections import deque

import zmq

#: An eMQP REQUEST's frames after the empty delimiter (about 200 bytes).
PAYLOAD = [
    b"eMQP/1.0",
    b"REQUEST",
    b"0d4b6a1e-51ab-4e0f-a6f7-92c7f3a1d2be",
    b"default",
    b"",
    b'["run", {"path": "benchmarks.noop_jobs", "callable": "noop", "args": [12345], '
    b'"kwargs": {}, "class_args": [], "class_kwargs": {}}]',
]


def _socket(ctx: zmq.Context[zmq.Socket[bytes]], kind: int) -> zmq.Socket[bytes]:
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    return sock


def broker(frontend_addr: str, backend_addr: str) -> None:
    ctx = zmq.Context()
    frontend, backend = _socket(ctx, zmq.ROUTER), _socket(ctx, zmq.ROUTER)
    frontend.bind(frontend_addr)
    backend.bind(backend_addr)
    free: deque[bytes] = deque()
    waiting: deque[list[zmq.Frame]] = deque()
    poller = zmq.Poller()
    poller.register(frontend, zmq.POLLIN)
    poller.register(backend, zmq.POLLIN)
    print("broker ready", flush=True)
    while True:
        for sock, _ in poller.poll():
            if sock is backend:
                # [worker, "", "R"|"HI", client?, ...frames]
                while backend.poll(0):
                    frames = backend.recv_multipart(copy=False)
                    worker = frames[0].bytes
                    kind = frames[2].bytes
                    if kind == b"R":
                        frontend.send_multipart(frames[3:], copy=False)
                        credit = 1
                    else:
                        credit = int(frames[3].bytes)
                    for _ in range(credit):
                        if waiting:
                            backend.send_multipart([worker, b"", *waiting.popleft()], copy=False)
                        else:
                            free.append(worker)
            else:
                while frontend.poll(0):
                    frames = frontend.recv_multipart(copy=False)  # [client, "", ...]
                    if free:
                        backend.send_multipart([free.popleft(), b"", *frames], copy=False)
                    else:
                        waiting.append(frames)


def worker(backend_addr: str, credit: int) -> None:
    ctx = zmq.Context()
    sock = _socket(ctx, zmq.DEALER)
    sock.connect(backend_addr)
    sock.send_multipart([b"", b"HI", str(credit).encode()])
    while True:
        frames = sock.recv_multipart(copy=False)  # ["", client, "", ...payload]
        sock.send_multipart([b"", b"R", *frames[1:]], copy=False)


def client(frontend_addr: str, count: int, window: int) -> None:
    ctx = zmq.Context()
    sock = _socket(ctx, zmq.DEALER)
    sock.connect(frontend_addr)
    message = [b"", *PAYLOAD]

    def run(n: int) -> float:
        sent = received = 0
        start = time.perf_counter()
        while received < n:
            while sent < n and sent - received < window:
                sock.send_multipart(message)
                sent += 1
            sock.recv_multipart()
            received += 1
            while received < n and sock.poll(0):
                sock.recv_multipart()
                received += 1
        return time.perf_counter() - start

    run(min(1000, count))  # warm-up: connections, caches
    elapsed = run(count)
    print(json.dumps({"round_trips": count, "seconds": elapsed, "per_second": count / elapsed}))


def push(addr: str, count: int) -> None:
    ctx = zmq.Context()
    sock = _socket(ctx, zmq.PUSH)
    sock.connect(addr)
    message = [b"", *PAYLOAD]
    for _ in range(count + 1):
        sock.send_multipart(message)
    sock.close(linger=10_000)
    ctx.term()


def pull(addr: str, count: int) -> None:
    ctx = zmq.Context()
    sock = _socket(ctx, zmq.PULL)
    sock.bind(addr)
    print("pull ready", flush=True)
    sock.recv_multipart()  # the clock starts at the first message
    start = time.perf_counter()
    for _ in range(count):
        sock.recv_multipart()
    elapsed = time.perf_counter() - start
    print(json.dumps({"messages": count, "seconds": elapsed, "per_second": count / elapsed}))


def main(argv: list[str]) -> None:
    role, *args = argv
    if role == "broker":
        broker(args[0], args[1])
    elif role == "worker":
        worker(args[0], int(args[1]))
    elif role == "client":
        client(args[0], int(args[1]), int(args[2]))
    elif role == "push":
        push(args[0], int(args[1]))
    elif role == "pull":
        pull(args[0], int(args[1]))
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
