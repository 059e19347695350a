"""A process whose address is taken stops with one line naming it, not a ZMQError traceback.

Real processes (``python -m django_eventmq`` and ``manage.py``) are started with
one of their addresses held by a listening socket of this test.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator

import pytest

from django_eventmq.errors import ConfigurationError
from django_eventmq.runtime import transport
from tests.django.test_commands import run
from tests.support import python_module

ANY = "tcp://127.0.0.1:*"
ANY_ADDRS = ("--frontend", ANY, "--backend", ANY, "--admin", ANY)
EMQ_ROUTER = (sys.executable, "manage.py", "emq_router", "--no-journal")
DJANGO = {"DJANGO_SETTINGS_MODULE": "example_project.settings"}


@pytest.fixture
def held() -> Iterator[int]:
    """A loopback port another socket listens on for the whole test."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def router_args(role: str, port: int) -> list[str]:
    addrs = {"frontend": ANY, "backend": ANY, "admin": ANY, role: f"tcp://127.0.0.1:{port}"}
    return [arg for name, addr in addrs.items() for arg in (f"--{name}", addr)]


def only_error_line(stderr: str) -> str:
    """The one line the failure printed (after any log lines), with no traceback."""
    assert "Traceback" not in stderr
    assert "ZMQError" not in stderr
    [line] = [line for line in stderr.splitlines() if "cannot " in line]
    return line


@pytest.mark.parametrize("role", ["frontend", "backend", "admin"])
def test_router_on_a_taken_port_names_the_address_setting_and_variable(role, held):
    done = run(python_module("router", "--no-journal", *router_args(role, held)))
    assert done.returncode == 1
    line = only_error_line(done.stderr)
    setting = f"{role.upper()}_ADDR"
    assert line == (
        f"python -m django_eventmq router: error: cannot bind {setting} tcp://127.0.0.1:{held}: "
        "address already in use (another process listens there); stop it, or choose another "
        f"address with EVENTMQ['{setting}'], EMQ_{setting} or --{role}"
    )


def test_emq_router_on_a_taken_port_set_by_the_environment(held):
    done = run(
        [
            sys.executable,
            "manage.py",
            "emq_router",
            "--no-journal",
            "--backend",
            ANY,
            "--admin",
            ANY,
        ],
        EMQ_FRONTEND_ADDR=f"tcp://127.0.0.1:{held}",
        **DJANGO,
    )
    assert done.returncode != 0
    line = only_error_line(done.stderr)
    assert line.startswith(f"CommandError: cannot bind FRONTEND_ADDR tcp://127.0.0.1:{held}: ")
    assert "EVENTMQ['FRONTEND_ADDR'], EMQ_FRONTEND_ADDR or --frontend" in line


def test_publisher_on_a_taken_port(held):
    done = run(python_module("pubsub", "--incoming", ANY, "--outgoing", f"tcp://127.0.0.1:{held}"))
    assert done.returncode == 1
    line = only_error_line(done.stderr)
    assert f"cannot bind PUBLISHER_OUTGOING_ADDR tcp://127.0.0.1:{held}: address already" in line
    assert "EVENTMQ['PUBLISHER_OUTGOING_ADDR'], EMQ_PUBLISHER_OUTGOING_ADDR or --outgoing" in line


def test_emq_router_metrics_on_a_taken_port(held):
    done = run(
        [*EMQ_ROUTER, *ANY_ADDRS, "--metrics", f"127.0.0.1:{held}"],
        **DJANGO,
    )
    assert done.returncode != 0
    line = only_error_line(done.stderr)
    assert line == (
        f"CommandError: cannot serve metrics on '127.0.0.1:{held}' (--metrics): Address already "
        "in use; stop what listens there, or choose another port with --metrics"
    )


def test_an_address_that_cannot_be_bound_for_another_reason(tmp_path):
    # In-process: a Channel told which setting its address came from.
    addr = f"ipc://{tmp_path}/no-such-dir/router.sock"
    with pytest.raises(ConfigurationError) as caught:
        transport.Channel(transport.ROUTER, bind=addr, bind_setting="BACKEND_ADDR")
    assert str(caught.value) == (
        f"cannot bind BACKEND_ADDR {addr}: No such file or directory; "
        "choose another address with EVENTMQ['BACKEND_ADDR'], EMQ_BACKEND_ADDR"
    )
