"""End to end with CURVE: a router and job managers started with keys in ``EMQ_*``.

(a) a keyed client's job runs; (b) a client with a wrong key or none cannot
enqueue (its job never runs); (c) a job manager with a wrong key receives
nothing, keeps retrying, and stops on SIGTERM.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from django_eventmq.protocol import JobBody, Request
from django_eventmq.runtime import security, transport
from django_eventmq.runtime.settings import from_mapping
from django_eventmq.runtime.transport import Channel
from tests.keys import Keys
from tests.support import Proc, python_module, tcp_addr, wait_for

#: How long a job that must not run is given to run anyway.
NEVER_DEADLINE = 3.0


def _server_env(keys: Keys) -> dict[str, str]:
    return {
        "EMQ_CURVE_SERVER_SECRET_KEY": keys.server[1],
        "EMQ_CURVE_FRONTEND_CLIENTS": keys.client[0],
        "EMQ_CURVE_BACKEND_WORKERS": keys.worker[0],
        "EMQ_CURVE_ADMIN_CLIENTS": keys.admin[0],
    }


def _peer_env(keys: Keys, pair: tuple[str, str]) -> dict[str, str]:
    return {"EMQ_CURVE_SERVER_PUBLIC_KEY": keys.server[0], "EMQ_CURVE_CLIENT_SECRET_KEY": pair[1]}


@pytest.fixture
def router(keys: Keys, tmp_path: Path) -> Iterator[dict[str, str]]:
    addrs = {"frontend": tcp_addr(), "backend": tcp_addr(), "admin": tcp_addr()}
    proc = Proc(
        python_module(
            "router", "--frontend", addrs["frontend"], "--backend", addrs["backend"],
            "--admin", addrs["admin"],
        ),
        env={**_server_env(keys), "EMQ_JOURNAL_PATH": str(tmp_path / "journal.sqlite3")},
    )  # fmt: skip
    try:
        proc.wait_output(r"router ready")
        proc.wait_output(r"ZAP authentication on", timeout=5)
        yield addrs
    finally:
        proc.stop()


def _jobmanager(
    keys: Keys, backend: str, pair: tuple[str, str], extra_env: dict[str, str] | None = None
) -> Proc:
    return Proc(
        python_module(
            "jobmanager", "--broker", backend, "--concurrency", "1",
            "--job-module", "tests.jobs_fixtures.sample",
        ),
        env={**_peer_env(keys, pair), **(extra_env or {})},
    )  # fmt: skip


def _send_jobs(frontend: str, sends: list[tuple[dict[int, Any], str]], out: Path) -> None:
    """One job per (socket options, tag), each from its own socket; all sent at once,
    then each socket given (together) a second for its handshake before it closes."""
    channels: list[Channel] = []
    try:
        for options, tag in sends:
            channel = Channel(transport.DEALER, connect=frontend, options=options)
            channels.append(channel)
            body = JobBody(
                path="tests.jobs_fixtures.sample", callable="record", args=(str(out), tag)
            ).encode()
            channel.send(Request(msgid=f"e2e-{tag}", queue="default", body_text=body))
        deadline = time.monotonic() + 1.0
        for channel in channels:
            channel.poll(max(0, int((deadline - time.monotonic()) * 1000)))
    finally:
        for channel in channels:
            channel.close()


def _send_job(frontend: str, options: dict[int, Any], out: Path, tag: str) -> None:
    _send_jobs(frontend, [(options, tag)], out)


def _ran(out: Path) -> set[str]:
    return {line.split()[0] for line in out.read_text().splitlines()} if out.exists() else set()


def _client_options(keys: Keys, pair: tuple[str, str] | None) -> dict[int, Any]:
    if pair is None:
        return {}
    settings = from_mapping(
        {"CURVE_SERVER_PUBLIC_KEY": keys.server[0], "CURVE_CLIENT_SECRET_KEY": pair[1]},
        environ={},
    )
    return security.secure_channel_options(settings, "frontend", security.CLIENT)


def test_keyed_client_job_runs_and_unkeyed_ones_never_do(
    keys: Keys, router: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "ran.txt"
    manager = _jobmanager(keys, router["backend"], keys.worker)
    try:
        manager.wait_output(r"jobmanager ready")
        unkeyed = (("wrong", keys.stranger), ("none", None), ("worker-key", keys.worker))
        _send_jobs(router["frontend"], [(_client_options(keys, p), t) for t, p in unkeyed], out)
        _send_job(router["frontend"], _client_options(keys, keys.client), out, "good")
        wait_for(lambda: "good" in _ran(out), 20.0, "the keyed client's job to run")
        with pytest.raises(AssertionError, match="timed out"):
            wait_for(lambda: _ran(out) - {"good"}, NEVER_DEADLINE, "an unkeyed job to run")
    finally:
        manager.stop()


def test_job_manager_with_a_wrong_key_receives_nothing(
    keys: Keys, router: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "ran.txt"
    impostor = _jobmanager(keys, router["backend"], keys.stranger)
    try:
        impostor.wait_output(r"jobmanager ready")
        _send_job(router["frontend"], _client_options(keys, keys.client), out, "queued")
        with pytest.raises(AssertionError, match="timed out"):
            wait_for(lambda: _ran(out), NEVER_DEADLINE, "the impostor to run a job")
        # The job was queued, not lost: a job manager with the right key runs it.
        manager = _jobmanager(keys, router["backend"], keys.worker)
        try:
            wait_for(lambda: "queued" in _ran(out), 20.0, "the keyed job manager to run it")
        finally:
            manager.stop()
    finally:
        impostor.stop()


def test_job_manager_whose_key_is_refused_keeps_retrying_and_stops_on_sigterm(
    keys: Keys, router: dict[str, str]
) -> None:
    # Its DEALER has no connection once the handshake failed: a heartbeat sent
    # blocking hung the job manager for good at the first one (no reconnect,
    # SIGTERM unheard until SIGKILL). Short heartbeats reach that point soon.
    impostor = _jobmanager(
        keys,
        router["backend"],
        keys.stranger,
        {"EMQ_HEARTBEAT_INTERVAL": "0.2", "EMQ_HEARTBEAT_TIMEOUT": "0.6"},
    )
    try:
        impostor.wait_output(r"jobmanager waiting for the router at \S+: no answer yet", 10.0)
    finally:
        code = impostor.stop(timeout=10.0)
    assert code == 0, impostor.output()
    assert "jobmanager stopped" in impostor.output()
