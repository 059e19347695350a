"""A live router process fed random and mutated frames from several peers on all
three sockets at once, interleaved with valid jobs: it stays up and every valid
job runs (in a real job manager, which writes each one to a file)."""

from __future__ import annotations

import json
import random
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import (
    Ack,
    Disconnect,
    Headers,
    Heartbeat,
    Inform,
    JobBody,
    Publish,
    Ready,
    Reply,
    Request,
    Schedule,
    decode,
    encode,
)
from tests.support import Proc, python_module, tcp_addr, wait_for

VALID_JOBS = 40
FUZZ_PER_PEER = 300
PEERS_PER_SOCKET = 2

# Seeds for mutation. None names a job that exists: a mutated one must never run.
_UNKNOWN = JobBody(path="app.jobs", callable="send", args=(1,)).encode()
GUARANTEE = Headers(guarantee=True)
RETRY = Headers(retry_count=3, timeout=30)
REPLY = Headers(reply_requested=True)
SEEDS: list[list[bytes]] = [
    encode(Request(msgid="m", queue="default", headers=GUARANTEE, body_text=_UNKNOWN)),
    encode(Request(msgid="m", queue="default", headers=REPLY, body_text="{}")),
    encode(Schedule(msgid="s", queue="default", body_text=_UNKNOWN, interval=60)),
    encode(Inform(msgid="i", queues=((10, "default"),))),
    encode(Ready(msgid="r")),
    encode(Reply(msgid="p", payload='{"value": 1}', reply_to="nope")),
    encode(Heartbeat(msgid="h", timestamp=1.0)),
    encode(Ack(msgid="a", ack_msgid="x")),
    encode(Publish(msgid="p", topic="t", body_text="{}")),
    [b"", b"eMQP/1.0", b"STATUS", b"s"],
    [b"", b"eMQP/1.0", b"MONITOR", b"s"],
]


def fuzzed(rng: random.Random) -> list[bytes]:
    """One random or mutated message (never empty)."""
    kind = rng.random()
    if kind < 0.1:
        return [rng.randbytes(rng.randint(0, 64)) for _ in range(rng.randint(1, 8))]
    if kind < 0.13:
        return [b"", b"eMQP/1.0", b"REQUEST", b"long", *([b"x"] * rng.randint(30, 80))]
    if kind < 0.15:
        return [b"", b"eMQP/1.0", b"REQUEST", b"big", b"default", b"", b"x" * 300_000]
    frames = list(rng.choice(SEEDS))
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(frames))
        op = rng.randrange(6)
        if op == 0 and frames[i]:
            b = bytearray(frames[i])
            b[rng.randrange(len(b))] ^= rng.randint(1, 255)
            frames[i] = bytes(b)
        elif op == 1 and len(frames) > 1:
            del frames[i]
        elif op == 2:
            frames.insert(i, frames[i])
        elif op == 3:
            frames[i] = frames[i][: rng.randint(0, len(frames[i]))]
        elif op == 4:
            frames.insert(i, rng.randbytes(rng.randint(0, 20)))
        else:
            frames[i] = rng.choice(
                [b"", b"-1", b"NaN", b"[[", b"retry-count:1000", b"timeout:9999999999",
                 b"\xff\xfe", b"worker", b"scheduler", b'["run",{}]', b"1e400"]
            )  # fmt: skip
    return frames


def harmful(frames: list[bytes], socket: str) -> bool:
    """Messages a fuzz peer must not send: they are legitimate commands that would
    (rightly) change the router, not malformed input. An admin DISCONNECT stops
    it; a worker INFORM on the backend makes the fuzz peer a job manager that
    never runs what it is given."""
    try:
        message = decode(frames, admin=socket == "admin")
    except ProtocolError:
        return False
    if socket == "admin":
        return isinstance(message, Disconnect)
    if socket == "backend":
        return isinstance(message, Inform)
    return False


@pytest.fixture
def system(tmp_path: Path) -> Iterator[dict[str, str]]:
    addrs = {"frontend": tcp_addr(), "backend": tcp_addr(), "admin": tcp_addr()}
    env = {"EMQ_JOURNAL_PATH": str(tmp_path / "journal.sqlite3")}
    router = Proc(
        python_module(
            "router", "--frontend", addrs["frontend"], "--backend", addrs["backend"],
            "--admin", addrs["admin"],
        ),
        env=env,
    )  # fmt: skip
    procs = [router]
    try:
        router.wait_output(r"router ready")
        manager = Proc(
            python_module(
                "jobmanager", "--broker", addrs["backend"], "--concurrency", "2",
                "--job-module", "tests.jobs_fixtures.sample",
            )
        )  # fmt: skip
        procs.append(manager)
        manager.wait_output(r"jobmanager ready")
        yield {**addrs, "router_pid": str(router.pid)}
        for proc in procs:
            assert proc.popen.poll() is None, f"{proc.args[3]} died:\n{proc.output()[-3000:]}"
    finally:
        for proc in reversed(procs):
            proc.stop()


def _fuzz_peer(addr: str, socket: str, seed: int, errors: list[BaseException]) -> None:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.IDENTITY, f"fuzz-{socket}-{seed}".encode())
    sock.setsockopt(zmq.SNDTIMEO, 5000)
    sock.connect(addr)
    rng = random.Random(seed)
    try:
        sent = 0
        while sent < FUZZ_PER_PEER:
            frames = fuzzed(rng)
            if harmful(frames, socket):
                continue
            sock.send_multipart(frames)
            sent += 1
            while sock.poll(0):  # read what the router answers, so its pipe never fills
                sock.recv_multipart()
    except BaseException as exc:  # reported by the test, not lost in the thread
        errors.append(exc)
    finally:
        sock.close(linger=0)


def test_router_survives_fuzzing_on_all_sockets_and_runs_every_valid_job(
    system: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "ran.txt"
    errors: list[BaseException] = []
    threads = [
        threading.Thread(
            target=_fuzz_peer, args=(system[socket], socket, 1000 * n + i, errors), daemon=True
        )
        for n, socket in enumerate(("frontend", "backend", "admin"))
        for i in range(PEERS_PER_SOCKET)
    ]
    client: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    client.setsockopt(zmq.LINGER, 0)
    client.setsockopt(zmq.IDENTITY, b"valid-client")
    client.connect(system["frontend"])
    acked: set[str] = set()
    try:
        for thread in threads:
            thread.start()
        msgids = []
        for i in range(VALID_JOBS):
            body = JobBody(
                path="tests.jobs_fixtures.sample", callable="record", args=(str(out), f"job-{i}")
            ).encode()
            msgid = f"valid-{i}-{uuid.uuid4()}"
            msgids.append(msgid)
            client.send_multipart(encode(Request(msgid=msgid, queue="default", body_text=body)))
        for thread in threads:
            thread.join(60)
        assert not [t for t in threads if t.is_alive()], "a fuzz peer hung"
        assert errors == []

        def all_acked() -> bool:
            while client.poll(0):
                frames = client.recv_multipart()
                if frames[2] == b"ACK":
                    acked.add(frames[4].decode())
            return set(msgids) <= acked

        wait_for(all_acked, 20.0, "the router to acknowledge every valid job")

        def ran() -> set[str]:
            if not out.exists():
                return set()
            return {line.split()[0] for line in out.read_text().splitlines()}

        expected = {f"job-{i}" for i in range(VALID_JOBS)}
        wait_for(lambda: ran() >= expected, 30.0, "every valid job to run")
        assert ran() == expected

        # Still answering administration: alive, not merely not-yet-dead.
        admin: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
        admin.setsockopt(zmq.LINGER, 0)
        admin.connect(system["admin"])
        try:
            admin.send_multipart([b"", b"eMQP/1.0", b"STATUS", b"st"])
            assert admin.poll(10_000), "router does not answer STATUS after fuzzing"
            reply = admin.recv_multipart()
            assert reply[2] == b"REPLY"
            json.loads(reply[-1])
        finally:
            admin.close(linger=0)
    finally:
        client.close(linger=0)
