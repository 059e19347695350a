"""RabbitMQ for the durable benchmark: a vhost of its own on the server at
127.0.0.1:5672, made with ``rabbitmqctl`` and removed at the end.

The server itself is never restarted or reconfigured; only the vhost
``emq-bench-<random>`` comes and goes. :func:`rabbit_missing` says why
RabbitMQ cannot be used here (for a skip line).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import uuid

HOST, PORT = "127.0.0.1", 5672
USER = PASSWORD = "guest"


def rabbit_missing() -> str | None:
    """Why RabbitMQ cannot be used here, or None when it can."""
    try:
        with socket.create_connection((HOST, PORT), timeout=2):
            pass
    except OSError as exc:
        return f"nothing answers on {HOST}:{PORT} ({exc.strerror or exc})"
    if shutil.which("rabbitmqctl") is None:
        return "rabbitmqctl is not on PATH (needed to make and remove the benchmark's vhost)"
    return None


def _ctl(*args: str) -> None:
    done = subprocess.run(
        ["rabbitmqctl", *args], capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"rabbitmqctl {' '.join(args)}: {(done.stderr or done.stdout)[-500:]}")


class Vhost:
    """A vhost made for the benchmark (``guest`` may use it); :meth:`remove` deletes it."""

    def __init__(self) -> None:
        self.name = f"emq-bench-{uuid.uuid4().hex[:10]}"
        _ctl("add_vhost", self.name)
        try:
            _ctl("set_permissions", "-p", self.name, USER, ".*", ".*", ".*")
        except BaseException:
            self.remove()
            raise

    @property
    def url(self) -> str:
        return f"amqp://{USER}:{PASSWORD}@{HOST}:{PORT}/{self.name}"

    def remove(self) -> None:
        _ctl("delete_vhost", self.name)
