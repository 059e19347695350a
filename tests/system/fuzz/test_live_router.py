"""A live router process fed random and mutated frames from several peers on all
three sockets at once, interleaved with valid jobs: it stays up and every valid
job runs (in a real job manager, which writes each one to a file).

Two drivers: seeded ``random`` (many messages, cheap), and hypothesis, whose
examples are batches spread over six concurrent peers, each followed by a valid
job and a STATUS the router must answer.
"""

from __future__ import annotations

import json
import queue
import random
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import (
    Ack,
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
#: The router's MAX_BODY_BYTES here: small, so over-size bodies are cheap to send.
MAX_BODY = 65_536

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
            frames[i] = rng.choice(REPLACEMENTS)
    return frames


REPLACEMENTS = [b"", b"-1", b"NaN", b"[[", b"retry-count:1000", b"timeout:9999999999",
                b"\xff\xfe", b"worker", b"scheduler", b'["run",{}]', b"1e400"]  # fmt: skip
#: Over MAX_FRAMES, and over MAX_BODY_BYTES.
LONG = [b"", b"eMQP/1.0", b"REQUEST", b"long", *([b"x"] * 40)]
BIG = [b"", b"eMQP/1.0", b"REQUEST", b"big", b"default", b"", b"x" * (MAX_BODY + 1)]


def harmful(frames: list[bytes], socket: str) -> bool:
    """Messages a fuzz peer must not send: they are legitimate commands that would
    (rightly) change the router, not malformed input: a worker INFORM on the
    backend makes the fuzz peer a job manager that never runs what it is given.
    Nothing on the admin socket is: a DISCONNECT or POISONED_* without the
    router's admin token is refused (docs/security.md)."""
    try:
        message = decode(frames, admin=socket == "admin")
    except ProtocolError:
        return False
    if socket == "backend":
        return isinstance(message, Inform)
    return False


@pytest.fixture
def system(tmp_path: Path) -> Iterator[dict[str, str]]:
    addrs = {"frontend": tcp_addr(), "backend": tcp_addr(), "admin": tcp_addr()}
    env = {
        "EMQ_JOURNAL_PATH": str(tmp_path / "journal.sqlite3"),
        "EMQ_MAX_BODY_BYTES": str(MAX_BODY),
    }
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


def _valid_job(out: Path, tag: str) -> tuple[str, list[bytes]]:
    """A REQUEST the job manager runs (it writes ``tag`` to ``out``): (msgid, frames)."""
    body = JobBody(path="tests.jobs_fixtures.sample", callable="record", args=(str(out), tag))
    msgid = f"valid-{tag}-{uuid.uuid4()}"
    return msgid, encode(Request(msgid=msgid, queue="default", body_text=body.encode()))


def _client(addr: str, identity: bytes) -> zmq.Socket[bytes]:
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.IDENTITY, identity)
    sock.connect(addr)
    return sock


def _assert_answers_status(admin: zmq.Socket[bytes]) -> None:
    """Alive, not merely not-yet-dead: STATUS gets a JSON REPLY."""
    admin.send_multipart([b"", b"eMQP/1.0", b"STATUS", uuid.uuid4().hex.encode()])
    assert admin.poll(10_000), "router does not answer STATUS after fuzzing"
    reply = admin.recv_multipart()
    assert reply[2] == b"REPLY"
    json.loads(reply[-1])


def _assert_every_job_acked_and_run(
    client: zmq.Socket[bytes], msgids: list[str], out: Path, tags: set[str]
) -> None:
    acked: set[str] = set()

    def all_acked() -> bool:
        while client.poll(0):
            frames = client.recv_multipart()
            if frames[2] == b"ACK":
                acked.add(frames[4].decode())
        return set(msgids) <= acked

    wait_for(all_acked, 30.0, "the router to acknowledge every valid job")

    def ran() -> set[str]:
        if not out.exists():
            return set()
        return {line.split()[0] for line in out.read_text().splitlines()}

    wait_for(lambda: ran() >= tags, 30.0, "every valid job to run")
    assert ran() == tags


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
    client = _client(system["frontend"], b"valid-client")
    admin = _client(system["admin"], b"valid-admin")
    try:
        for thread in threads:
            thread.start()
        msgids = []
        for i in range(VALID_JOBS):
            msgid, frames = _valid_job(out, f"job-{i}")
            msgids.append(msgid)
            client.send_multipart(frames)
        for thread in threads:
            thread.join(60)
        assert not [t for t in threads if t.is_alive()], "a fuzz peer hung"
        assert errors == []
        _assert_every_job_acked_and_run(
            client, msgids, out, {f"job-{i}" for i in range(VALID_JOBS)}
        )
        _assert_answers_status(admin)
    finally:
        client.close(linger=0)
        admin.close(linger=0)


# -- hypothesis: generated batches over six concurrent peers -------------------------

#: The router socket of each hypothesis peer.
PEER_SOCKETS = ("frontend", "frontend", "backend", "backend", "admin", "admin")
#: Examples per run: each is a batch, a valid job and a STATUS (a few seconds in all).
EXAMPLES = 100


@st.composite
def mutated(draw: st.DrawFn) -> list[bytes]:
    """A real message with one to four flipped, dropped, doubled, cut, inserted or
    replaced frames."""
    frames = list(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(frames) - 1))
        op = draw(st.sampled_from(["flip", "drop", "dup", "cut", "insert", "replace"]))
        if op == "flip" and frames[i]:
            b = bytearray(frames[i])
            b[draw(st.integers(0, len(b) - 1))] ^= draw(st.integers(1, 255))
            frames[i] = bytes(b)
        elif op == "drop" and len(frames) > 1:
            del frames[i]
        elif op == "dup":
            frames.insert(i, frames[i])
        elif op == "cut":
            frames[i] = frames[i][: draw(st.integers(0, len(frames[i])))]
        elif op == "insert":
            frames.insert(i, draw(st.binary(max_size=20)))
        elif op == "replace":
            frames[i] = draw(st.sampled_from(REPLACEMENTS))
    return frames


FUZZ_MESSAGE = st.one_of(
    mutated(),
    st.lists(st.binary(max_size=64), min_size=1, max_size=8),
    st.sampled_from([LONG, BIG]),
)
#: One example: (peer index, frames) pairs, sent by the peers concurrently.
BATCH = st.lists(
    st.tuples(st.integers(0, len(PEER_SOCKETS) - 1), FUZZ_MESSAGE), min_size=1, max_size=24
)


class _Peer(threading.Thread):
    """A fuzz peer: its own DEALER on one router socket, made and used in its thread;
    sends each batch it is handed (``batches``; None stops it), then says so on
    ``done`` (None, or the exception), and reads whatever the router answers."""

    def __init__(self, addr: str, socket: str, index: int) -> None:
        super().__init__(daemon=True, name=f"fuzz-{socket}-{index}")
        self.addr = addr
        self.socket = socket
        self.batches: queue.Queue[list[list[bytes]] | None] = queue.Queue()
        self.done: queue.Queue[BaseException | None] = queue.Queue()
        self.sent = 0

    def run(self) -> None:
        sock = _client(self.addr, f"hyp-{self.name}".encode())
        sock.setsockopt(zmq.SNDTIMEO, 5000)
        try:
            while True:
                handed = True
                try:
                    batch = self.batches.get(timeout=0.05)
                except queue.Empty:
                    batch, handed = [], False  # nothing to send: read answers
                if batch is None:
                    return
                try:
                    for frames in batch:
                        if not harmful(frames, self.socket):
                            sock.send_multipart(frames)
                            self.sent += 1
                    while sock.poll(0):  # so the router's pipe to us never fills
                        sock.recv_multipart()
                except BaseException as exc:  # handed to the test, not lost here
                    self.done.put(exc)
                    return
                if handed:
                    self.done.put(None)
        finally:
            sock.close(linger=0)


def test_router_survives_hypothesis_batches_from_concurrent_peers(
    system: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "ran.txt"
    peers = [_Peer(system[socket], socket, i) for i, socket in enumerate(PEER_SOCKETS)]
    client = _client(system["frontend"], b"hyp-valid-client")
    admin = _client(system["admin"], b"hyp-valid-admin")
    msgids: list[str] = []
    tags: set[str] = set()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(batch=BATCH)
    def example(batch: list[tuple[int, list[bytes]]]) -> None:
        for n, peer in enumerate(peers):  # all six send their share at once
            peer.batches.put([frames for p, frames in batch if p == n])
        for peer in peers:
            try:
                error = peer.done.get(timeout=60)
            except queue.Empty:
                raise AssertionError(f"fuzz peer {peer.name} hung") from None
            if error is not None:
                raise error
        tag = f"hyp-{len(tags)}"
        msgid, frames = _valid_job(out, tag)
        client.send_multipart(frames)
        msgids.append(msgid)
        tags.add(tag)
        _assert_answers_status(admin)

    try:
        for peer in peers:
            peer.start()
        example()
        assert sum(peer.sent for peer in peers) > EXAMPLES  # the peers really sent
        _assert_every_job_acked_and_run(client, msgids, out, tags)
    finally:
        for peer in peers:
            peer.batches.put(None)
        for peer in peers:
            peer.join(10)
        client.close(linger=0)
        admin.close(linger=0)
