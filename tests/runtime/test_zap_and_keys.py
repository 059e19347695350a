"""The ZAP policy, the admin local-only rule, key loading and key generation."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
from pathlib import Path

import pytest
import zmq
from zmq.utils import z85

from django_eventmq.errors import ConfigurationError
from django_eventmq.protocol import Heartbeat
from django_eventmq.runtime import security, transport
from django_eventmq.runtime.settings import Settings, from_mapping
from django_eventmq.runtime.transport import Channel
from tests.keys import Keys
from tests.support import ROOT, python_module

# -- the pure policy ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "local"),
    [
        ("127.0.0.1", True),
        ("127.9.9.9", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("", True),  # ipc:// and inproc:// peers carry no address
        ("10.0.0.5", False),
        ("192.168.1.20", False),
        ("2001:db8::1", False),
        ("not-an-ip", False),
    ],
)
def test_is_local(address: str, local: bool) -> None:
    assert security.is_local(address) is local


def _raw(pair: tuple[str, str]) -> bytes:
    return z85.decode(pair[0].encode())


def test_decide_curve_keys(keys: Keys) -> None:
    p = security.Policy("frontend", frozenset({keys.client[0].encode()}), False)
    assert security.decide(p, "10.0.0.5", b"CURVE", [_raw(keys.client)]) == (
        True,
        "OK",
        keys.client[0],
    )
    assert security.decide(p, "10.0.0.5", b"CURVE", [_raw(keys.stranger)])[:2] == (
        False,
        "public key not allowed",
    )
    assert not security.decide(p, "127.0.0.1", b"NULL", [])[0]
    assert not security.decide(p, "127.0.0.1", b"PLAIN", [b"u", b"p"])[0]
    assert not security.decide(p, "127.0.0.1", b"CURVE", [b"short"])[0]
    assert not security.decide(None, "127.0.0.1", b"CURVE", [_raw(keys.client)])[0]


def test_decide_admin_local_only(keys: Keys) -> None:
    keyed = security.Policy("admin", frozenset({keys.admin[0].encode()}), True)
    assert security.decide(keyed, "127.0.0.1", b"CURVE", [_raw(keys.admin)])[0]
    refused = security.decide(keyed, "10.0.0.5", b"CURVE", [_raw(keys.admin)])
    assert refused[:2] == (False, "admin connections are limited to this host (ADMIN_LOCAL_ONLY)")
    plain = security.Policy("admin", None, True)
    assert security.decide(plain, "::1", b"NULL", [])[0]
    assert not security.decide(plain, "192.168.1.20", b"NULL", [])[0]


def test_policy_per_role(keys: Keys) -> None:
    s = keys.server_settings()
    assert security.policy(s, "frontend") == security.Policy(
        "frontend", frozenset({keys.client[0].encode()}), False
    )
    # The admin socket also accepts the router's own key (its metrics, emq_status on its host).
    assert security.policy(s, "admin") == security.Policy(
        "admin", frozenset({keys.admin[0].encode(), keys.server[0].encode()}), True
    )
    # The publisher falls back to the frontend's clients.
    assert security.policy(s, "publisher").keys == frozenset({keys.client[0].encode()})  # type: ignore[union-attr]
    assert security.policy(Settings(), "admin") == security.Policy("admin", None, True)
    assert security.policy(Settings(admin_local_only=False), "admin") is None
    assert security.policy(Settings(), "frontend") is None


def test_empty_key_list_with_curve_on_is_an_error(keys: Keys) -> None:
    s = from_mapping({"CURVE_SERVER_SECRET_KEY": keys.server[1]}, environ={})
    with pytest.raises(ConfigurationError, match="CURVE_FRONTEND_CLIENTS is empty"):
        security.Guard(s, ["frontend"]).start()
    # Not for the admin socket: the router's own key opens it.
    assert security.policy(s, "admin").keys == frozenset({keys.server[0].encode()})  # type: ignore[union-attr]


def test_admin_tools_choose_their_own_key_then_the_client_key_then_the_routers(
    keys: Keys,
) -> None:
    def admin_public(**values: str) -> bytes:
        s = from_mapping(values, environ={})
        options = security.secure_channel_options(s, "admin", "client")
        assert options[zmq.CURVE_SERVERKEY] == keys.server[0].encode()
        return bytes(options[zmq.CURVE_PUBLICKEY])

    server_public = keys.server[0]
    assert (
        admin_public(
            CURVE_SERVER_PUBLIC_KEY=server_public,
            CURVE_ADMIN_SECRET_KEY=keys.admin[1],
            CURVE_CLIENT_SECRET_KEY=keys.client[1],
        )
        == keys.admin[0].encode()
    )
    assert (
        admin_public(CURVE_SERVER_PUBLIC_KEY=server_public, CURVE_CLIENT_SECRET_KEY=keys.client[1])
        == keys.client[0].encode()
    )
    # On the router's host: its own key pair.
    assert admin_public(CURVE_SERVER_SECRET_KEY=keys.server[1]) == keys.server[0].encode()
    # The admin key is for the admin socket only; other sockets use the client key.
    s = from_mapping(
        {"CURVE_SERVER_PUBLIC_KEY": server_public, "CURVE_ADMIN_SECRET_KEY": keys.admin[1]},
        environ={},
    )
    with pytest.raises(ConfigurationError, match="CURVE_CLIENT_SECRET_KEY is not"):
        security.secure_channel_options(s, "frontend", "client")
    with pytest.raises(ConfigurationError, match="CURVE_ADMIN_SECRET_KEY is not"):
        security.secure_channel_options(
            from_mapping({"CURVE_SERVER_PUBLIC_KEY": server_public}, environ={}),
            "admin",
            "client",
        )


def test_an_admin_key_without_the_routers_public_key_is_a_settings_error(keys: Keys) -> None:
    with pytest.raises(ConfigurationError, match="CURVE_ADMIN_SECRET_KEY is set but"):
        from_mapping({"CURVE_ADMIN_SECRET_KEY": keys.admin[1]}, environ={})


# -- the ZAP handler on a real plain admin socket -------------------------------------


def test_plain_admin_socket_is_checked_by_zap_for_local_peers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No CURVE, ADMIN_LOCAL_ONLY on: the NULL handshake goes through ZAP.

    A non-loopback peer cannot be made here (tests use 127.0.0.1 only), so the
    address check is made to see every peer as remote for the refused half.
    """
    settings = Settings()
    with security.Guard(settings, ["admin"]):
        admin = Channel(
            transport.ROUTER,
            bind="tcp://127.0.0.1:*",
            options=security.secure_channel_options(settings, "admin", security.SERVER),
        )
        local = Channel(transport.DEALER, connect=admin.address, identity=b"local")
        try:
            local.send(Heartbeat(msgid="m1", timestamp=1.0))
            assert admin.poll(10_000) and admin.recv()[0] == b"local"
            monkeypatch.setattr(security, "is_local", lambda address: False)
            remote = Channel(transport.DEALER, connect=admin.address, identity=b"remote")
            try:
                # ZAP may have refused the connection already: then the DEALER has no
                # peer and a blocking send would wait forever (a CI run timed out here).
                with contextlib.suppress(transport.Again):
                    remote.send(Heartbeat(msgid="m2", timestamp=1.0), flags=transport.NOBLOCK)
                assert not admin.poll(1500)
            finally:
                remote.close()
        finally:
            local.close()
            admin.close()


def test_zap_handler_answers_malformed_requests() -> None:
    """Frames sent straight to the ZAP endpoint: bad version and unknown domain get 400."""
    settings = Settings()
    ctx = transport.context()
    with security.Guard(settings, ["admin"]):
        req = ctx.socket(zmq.REQ)
        req.setsockopt(zmq.LINGER, 0)
        req.connect("inproc://zeromq.zap.01")
        try:
            for request, code in (
                ([b"0.9", b"1", b"d", b"127.0.0.1", b"", b"NULL"], b"400"),
                ([b"1.0", b"2", b"no-such-domain", b"127.0.0.1", b"", b"NULL"], b"400"),
            ):
                req.send_multipart(request)
                assert req.poll(5000)
                reply = req.recv_multipart()
                assert reply[2] == code, reply
        finally:
            req.close(linger=0)


# -- loading keys ---------------------------------------------------------------------


def test_keys_from_z85_strings_files_and_directories(tmp_path: Path) -> None:
    lines = security.make_keys(["router", "client", "other"], str(tmp_path / "keys"))
    keydir = tmp_path / "keys"
    assert "router: public key" in lines[0]
    secret_mode = stat.S_IMODE(os.stat(keydir / "router.key_secret").st_mode)
    assert secret_mode == 0o600
    public_z85 = lines[0].rsplit(" ", 1)[1].encode()
    # From the secret file, from the public file, and from Z85 text: the same key.
    assert security.load_secret_key(str(keydir / "router.key_secret"), "X")[0] == public_z85
    assert security.load_public_key(str(keydir / "router.key"), "X") == public_z85
    assert security.load_public_key(public_z85.decode(), "X") == public_z85
    assert len(security.load_allowed_keys([str(keydir)], "X")) == 3
    with pytest.raises(ConfigurationError, match="holds no secret key"):
        security.load_secret_key(str(keydir / "router.key"), "CURVE_SERVER_SECRET_KEY")
    with pytest.raises(ConfigurationError, match="CURVE_FRONTEND_CLIENTS: 'nonsense'"):
        security.load_allowed_keys(["nonsense"], "CURVE_FRONTEND_CLIENTS")
    with pytest.raises(ConfigurationError, match="exists; pass --force"):
        security.make_keys(["router"], str(keydir))


def test_keys_from_environment_variables(keys: Keys) -> None:
    env = {
        "EMQ_CURVE_SERVER_SECRET_KEY": keys.server[1],
        "EMQ_CURVE_FRONTEND_CLIENTS": f"{keys.client[0]},{keys.stranger[0]}",
        "EMQ_CURVE_BACKEND_WORKERS": keys.worker[0],
        "EMQ_CURVE_ADMIN_CLIENTS": keys.admin[0],
        "EMQ_ADMIN_LOCAL_ONLY": "false",
    }
    s = from_mapping(environ=env)
    assert security.allowed_keys(s, "frontend") == {
        keys.client[0].encode(),
        keys.stranger[0].encode(),
    }
    assert security.policy(s, "admin").local_only is False  # type: ignore[union-attr]


def test_client_needs_its_own_key_pair(keys: Keys) -> None:
    half = from_mapping({"CURVE_SERVER_PUBLIC_KEY": keys.server[0]}, environ={})
    with pytest.raises(ConfigurationError, match="CURVE_CLIENT_SECRET_KEY is not"):
        security.secure_channel_options(half, "frontend", security.CLIENT)
    mismatched = from_mapping(
        {
            "CURVE_SERVER_PUBLIC_KEY": keys.server[0],
            "CURVE_CLIENT_SECRET_KEY": keys.client[1],
            "CURVE_CLIENT_PUBLIC_KEY": keys.worker[0],
        },
        environ={},
    )
    with pytest.raises(ConfigurationError, match="does not belong"):
        security.secure_channel_options(mismatched, "frontend", security.CLIENT)


def test_python_m_keys_prints_quoted_pairs() -> None:
    out = subprocess.run(
        python_module("keys", "router", "client"),
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    ).stdout
    pairs = dict(
        line.split("=", 1) for line in out.splitlines() if line and not line.startswith("#")
    )
    assert set(pairs) == {"router_public", "router_secret", "client_public", "client_secret"}
    public, secret = pairs["router_public"].strip("'"), pairs["router_secret"].strip("'")
    assert zmq.curve_public(secret.encode()).decode() == public


def test_manage_py_emq_keys_writes_files(tmp_path: Path) -> None:
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("emq_keys", "router", "jm", dir=str(tmp_path), stdout=out)
    assert (tmp_path / "jm.key_secret").exists()
    assert out.getvalue().count("public key") == 2
