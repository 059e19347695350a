"""RabbitMQ for the durable benchmark: a vhost of its own on the server at
127.0.0.1:5672, made at the start and removed at the end.

The vhost is made with ``rabbitmqctl`` (``add_vhost``, ``set_permissions``
for guest, ``delete_vhost``), or, where that is not on PATH or does not work
(another user's Erlang cookie), through the management plugin's HTTP API at
127.0.0.1:15672 as guest. The server itself is never restarted or
reconfigured; only the vhost ``emq-bench-<random>`` comes and goes.
:func:`rabbit_missing` says why RabbitMQ cannot be used here, and
:class:`Vhost` raises :class:`NoVhost` with both reasons when neither way
works (each a skip line).
"""

from __future__ import annotations

import base64
import shutil
import socket
import subprocess
import urllib.error
import urllib.parse
import urllib.request
import uuid

HOST, PORT = "127.0.0.1", 5672
USER = PASSWORD = "guest"
#: The management plugin's HTTP API (used when rabbitmqctl cannot make the vhost).
API = "http://127.0.0.1:15672/api"


class NoVhost(RuntimeError):
    """Neither rabbitmqctl nor the HTTP API could make the benchmark's vhost."""


def _answers(host: str, port: int) -> OSError | None:
    try:
        with socket.create_connection((host, port), timeout=2):
            return None
    except OSError as exc:
        return exc


def rabbit_missing() -> str | None:
    """Why RabbitMQ cannot be used here, or None when it can (or may: a vhost
    that cannot be made after all raises :class:`NoVhost`)."""
    down = _answers(HOST, PORT)
    if down is not None:
        return f"nothing answers on {HOST}:{PORT} ({down.strerror or down})"
    if shutil.which("rabbitmqctl") is None and _answers(*_api_address()) is not None:
        return f"neither rabbitmqctl on PATH nor the HTTP API at {API} (to make a vhost)"
    return None


def _api_address() -> tuple[str, int]:
    url = urllib.parse.urlsplit(API)
    return url.hostname or HOST, url.port or 15672


def _ctl(*args: str) -> None:
    if shutil.which("rabbitmqctl") is None:
        raise NoVhost("rabbitmqctl is not on PATH")
    done = subprocess.run(
        ["rabbitmqctl", *args], capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        raise NoVhost(f"rabbitmqctl {' '.join(args)}: {(done.stderr or done.stdout)[-300:]}")


def _http(method: str, path: str, api: str, body: bytes | None = None) -> None:
    request = urllib.request.Request(f"{api}{path}", data=body, method=method)
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30):
            pass
    except (urllib.error.URLError, OSError) as exc:
        raise NoVhost(f"HTTP API {method} {path}: {exc}") from exc


class Vhost:
    """A vhost made for the benchmark (``guest`` may use it); :meth:`remove` deletes it."""

    def __init__(self, api: str = API) -> None:
        self.name = f"emq-bench-{uuid.uuid4().hex[:10]}"
        self.api = api
        self.by_http = False
        try:
            _ctl("add_vhost", self.name)
        except NoVhost as ctl:
            try:
                _http("PUT", f"/vhosts/{self.name}", api)
            except NoVhost as http:
                raise NoVhost(f"{ctl}; {http}") from None
            self.by_http = True
        try:
            if self.by_http:
                perms = b'{"configure": ".*", "write": ".*", "read": ".*"}'
                _http("PUT", f"/permissions/{self.name}/{USER}", api, perms)
            else:
                _ctl("set_permissions", "-p", self.name, USER, ".*", ".*", ".*")
        except BaseException:
            self.remove()
            raise

    @property
    def url(self) -> str:
        return f"amqp://{USER}:{PASSWORD}@{HOST}:{PORT}/{self.name}"

    def remove(self) -> None:
        if self.by_http:
            _http("DELETE", f"/vhosts/{self.name}", self.api)
        else:
            _ctl("delete_vhost", self.name)
