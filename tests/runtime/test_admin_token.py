"""The admin token's file and gate (runtime/admin_token.py) without a router: where the
file goes, that only its user may read it, and which commands the gate asks it of."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from django_eventmq.errors import ConfigurationError
from django_eventmq.protocol import AdminRequest
from django_eventmq.runtime import admin_token
from django_eventmq.runtime.settings import Settings


def test_a_tcp_admin_address_is_named_by_its_port_and_ipc_by_its_path() -> None:
    assert admin_token.address_tag("tcp://127.0.0.1:47293") == "tcp-47293"
    assert admin_token.address_tag("tcp://*:47293") == "tcp-47293"
    assert admin_token.address_tag("tcp://[::1]:47293") == "tcp-47293"
    assert admin_token.address_tag("ipc:///run/emq/admin") == "ipc-run-emq-admin"


def test_the_default_directory_is_private_and_one_that_is_not_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    path = admin_token.token_path(Settings(), "tcp://127.0.0.1:5003")
    assert path == str(tmp_path / "django-eventmq" / "admin-tcp-5003.token")
    assert stat.S_IMODE(os.stat(tmp_path / "django-eventmq").st_mode) == 0o700
    os.chmod(tmp_path / "django-eventmq", 0o755)  # others could list and swap tokens
    with pytest.raises(ConfigurationError, match=r"ADMIN_TOKEN_FILE: .* not a directory only"):
        admin_token.token_path(Settings(), "tcp://127.0.0.1:5003")


def test_a_token_file_is_0600_replaced_whole_and_a_link_there_is_not_followed(
    tmp_path: Path,
) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    path = tmp_path / "admin.token"
    path.symlink_to(target)
    token = admin_token.write_token(str(path))
    assert not path.is_symlink() and target.read_text() == "keep"
    assert path.read_text() == token + "\n" and len(token) == 2 * admin_token.TOKEN_BYTES
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert admin_token.write_token(str(path)) != token
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_the_gate_asks_only_state_changing_commands_and_only_without_curve(
    tmp_path: Path,
) -> None:
    settings = Settings(admin_token_file=str(tmp_path / "admin-{admin}.token"))
    gate = admin_token.AdminGate(settings)
    gate.open("tcp://127.0.0.1:5003")
    assert gate.path == str(tmp_path / "admin-tcp-5003.token")
    token, _why = admin_token.read_token(settings, "tcp://localhost:5003")

    def ask(action: str, proof: str = "") -> str | None:
        return gate.refusal(AdminRequest(msgid="m", action=action, token=proof))

    assert ask("STATUS") is None and ask("MONITOR") is None
    for action in ("DISCONNECT", "POISONED_RETRY", "POISONED_PURGE"):
        assert ask(action) == f"{action} without the admin token"
        for wrong in (token[:-1], token + "0", token.upper(), "x" * len(token)):
            assert ask(action, wrong) == f"{action} with a token that is not this router's"
        assert ask(action, token) is None
    gate.close()
    assert not (tmp_path / "admin-tcp-5003.token").exists()
    open_gate = admin_token.AdminGate(settings.replace(admin_token_required=False))
    assert open_gate.refusal(AdminRequest(msgid="m", action="DISCONNECT")) is None


def test_with_curve_the_admin_key_is_the_proof_and_no_token_is_asked() -> None:
    import zmq

    _public, secret = zmq.curve_keypair()
    assert admin_token.needs_token(Settings())
    assert not admin_token.needs_token(Settings(curve_server_secret_key=secret.decode()))
