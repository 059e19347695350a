"""Without CURVE, a router process accepts the state-changing admin commands
(DISCONNECT, POISONED_RETRY, POISONED_PURGE) only with the admin token it wrote at
start to a 0600 file; STATUS and the other read-only commands stay open. The
shipped tools (``admin_client``, ``status --stop``) read the file and send it."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from django_eventmq.errors import AdminRefused
from django_eventmq.protocol import constants as C
from django_eventmq.runtime import admin_client, admin_token
from django_eventmq.runtime.settings import Settings
from tests.router.test_crash import JOB, RouterProcess, worker
from tests.router.test_router import Peer
from tests.support import ROOT, clean_environ, python_module, wait_for

DIED = "worker process exited with signal 9"


@pytest.fixture
def runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The default token directory's parent, for the router process and the tools here."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def router(runtime_dir: Path) -> Iterator[RouterProcess]:
    r = RouterProcess(runtime_dir, EMQ_POISON_AFTER="2", XDG_RUNTIME_DIR=str(runtime_dir))
    yield r
    r.stop()


def poison(r: RouterProcess, zctx: zmq.Context[Any], count: int) -> list[str]:
    """``count`` guaranteed jobs whose worker dies twice each: set aside as poisoned."""
    client = Peer(zctx, r.frontend, b"client")
    w = worker(zctx, r.backend, "w")
    msgids = []
    try:
        for _ in range(count):
            msgid = client.send("REQUEST", "default", "guarantee", JOB)
            assert client.expect("ACK", timeout=20)[2] == msgid
            for _death in range(2):
                assert w.expect("REQUEST", timeout=20)[1] == msgid
                w.send("DONE", msgid, "died", DIED)
            assert client.expect("REJECT", timeout=20)[2] == msgid
            msgids.append(msgid)
    finally:
        client.close()
        w.close()
    return msgids


def raw_admin(zctx: zmq.Context[Any], addr: str, command: str, *body: str) -> list[str]:
    """One admin command sent as any local process could: [COMMAND, MSGID, *body]."""
    peer = Peer(zctx, addr, f"anyone-{os.urandom(4).hex()}".encode())
    try:
        msgid = peer.send(command, *body)
        frames = peer.recv_raw(timeout=20)
        text = [f.decode() for f in frames[2:]]
        assert text[0] in ("REPLY", "ACK"), text
        assert text[0] == "REPLY" or text[2] == msgid
        return text
    finally:
        peer.close()


def poisoned_total(r: RouterProcess) -> int:
    status = admin_client.ask(r.admin, C.STATUS, 20, settings=Settings())
    return int(status["poisoned_messages_total"])


def test_disconnect_and_purge_without_the_token_are_refused_and_change_nothing(
    router: RouterProcess, zctx: zmq.Context[Any]
) -> None:
    msgids = poison(router, zctx, 2)
    assert poisoned_total(router) == 2
    token, why = admin_token.read_token(Settings(), router.admin)
    assert len(token) == 64, why
    wrong_value = ("0" if token[0] != "0" else "1") + token[1:]
    attempts = {
        "none": (),
        "empty": (C.ADMIN_TOKEN_PREFIX,),
        "short": (C.ADMIN_TOKEN_PREFIX + token[:-1],),
        "long": (C.ADMIN_TOKEN_PREFIX + token + "0",),
        "wrong": (C.ADMIN_TOKEN_PREFIX + wrong_value,),
    }
    for name, proof in attempts.items():
        for command in (C.POISONED_PURGE, C.POISONED_RETRY):
            answer = raw_admin(zctx, router.admin, command, *proof, *msgids)
            assert answer[0] == "REPLY", (name, answer)
            body = json.loads(answer[2])
            assert body["refused"] == command, (name, body)
            assert "changed nothing" in body["error"] and "ADMIN_TOKEN_FILE" in body["error"]
        answer = raw_admin(zctx, router.admin, C.DISCONNECT, *proof)
        assert answer[0] == "REPLY" and json.loads(answer[2])["refused"] == C.DISCONNECT, name
    # STATUS and the other read-only commands need nothing.
    for command in (C.STATUS, C.MONITOR, C.ROUTER_SHOW_WORKERS, C.ROUTER_SHOW_SCHEDULERS):
        answer = raw_admin(zctx, router.admin, command)
        assert answer[0] == "REPLY" and "refused" not in json.loads(answer[2]), command
    # Nothing changed: the router runs, both jobs are still set aside and not handed out.
    assert router.proc.popen.poll() is None
    status = admin_client.ask(router.admin, C.STATUS, 20, settings=Settings())
    assert sorted(p["msgid"] for p in status["poisoned_messages"]) == sorted(msgids)
    assert router.monitor()["queued"] == 0
    # One warning per refused peer and reason (each attempt was a new peer).
    refused = [line for line in router.proc.output().splitlines() if "refused, nothing" in line]
    assert len(refused) == 3 * len(attempts), refused
    assert not any(token in line for line in router.proc.output().splitlines())


def test_the_shipped_tools_send_the_token_and_the_commands_work(
    router: RouterProcess, zctx: zmq.Context[Any], runtime_dir: Path
) -> None:
    first, second = poison(router, zctx, 2)
    purged = admin_client.act_on_poisoned(
        router.admin, C.POISONED_PURGE, [first], 20, settings=Settings()
    )
    assert purged == [first]
    assert poisoned_total(router) == 1
    # The token file: 0600, in a directory only this user may use.
    path = Path(admin_token.token_path(Settings(), router.admin))
    assert path.parent == runtime_dir / "django-eventmq"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    # ``status --stop`` (DISCONNECT with the token) stops the router, which removes the file.
    env = {**clean_environ(), "PYTHONPATH": str(ROOT), "XDG_RUNTIME_DIR": str(runtime_dir)}
    done = subprocess.run(
        python_module("status", "--stop", "--admin", router.admin, "--timeout", "20"),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"router at {router.admin} is stopping" in done.stdout
    assert router.proc.popen.wait(30) == 0
    wait_for(lambda: not path.exists(), 10, "the token file to be removed")
    assert second not in purged


def test_a_tool_without_the_token_is_told_why(
    router: RouterProcess, runtime_dir: Path, tmp_path: Path
) -> None:
    elsewhere = Settings(admin_token_file=str(tmp_path / "missing.token"))
    with pytest.raises(AdminRefused, match=r"without the admin token.*missing\.token"):
        admin_client.stop_router(router.admin, 20, settings=elsewhere)
    assert router.proc.popen.poll() is None
    assert poisoned_total(router) == 0


def test_with_admin_token_required_off_a_reference_tool_may_stop_the_router(
    runtime_dir: Path, zctx: zmq.Context[Any]
) -> None:
    """ADMIN_TOKEN_REQUIRED=false: DISCONNECT without a token, as eventmq 0.3.13 sends it."""
    r = RouterProcess(runtime_dir, EMQ_ADMIN_TOKEN_REQUIRED="false")
    try:
        assert not list(runtime_dir.glob("django-eventmq/*.token"))
        assert raw_admin(zctx, r.admin, C.DISCONNECT)[0] == "ACK"
        assert r.proc.popen.wait(30) == 0
    finally:
        r.stop()
