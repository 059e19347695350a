"""Admin tools against a router process whose admin socket speaks CURVE.

``python -m django_eventmq status``, ``emq_status``, the admin dashboard and the
metrics collector connect with the admin key from the settings and get STATUS;
without a key, with a wrong one, or with the wrong router key they are refused
at once with a message naming the setting to change (not after the deadline).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from django_eventmq.admin import dashboard as admin_dashboard
from django_eventmq.errors import BrokerUnavailable
from django_eventmq.runtime import admin_client, security, transport
from django_eventmq.runtime.settings import Settings, from_mapping
from django_eventmq.runtime.transport import Channel
from tests.django.curve_router import curve_router
from tests.keys import Keys
from tests.support import ROOT, Proc, python_module, tcp_addr, wait_for

#: The status command's own deadline: long, so only a detected refusal ends it early
#: with the refusal's message (a missed one would end with "no answer ... within").
DEADLINE = "20"


@pytest.fixture(scope="module")
def router(keys: Keys, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Proc]]:
    """A CURVE router (no job manager needed for STATUS); yields (admin address, process)."""
    journal = tmp_path_factory.mktemp("journal") / "journal.sqlite3"
    with curve_router(keys, journal) as (admin, proc):
        proc.wait_output(r"ZAP authentication on .*admin \(CURVE, 2 key\(s\), local only\)")
        yield admin, proc


def run_status(admin: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    return subprocess.run(
        python_module("status", "--admin", admin, "--json", "--timeout", DEADLINE),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**clean, "PYTHONPATH": str(ROOT), **env},
        check=False,
    )


def test_status_with_the_admin_key_gets_status(keys: Keys, router: tuple[str, Proc]) -> None:
    admin, _proc = router
    done = run_status(
        admin,
        {
            "EMQ_CURVE_SERVER_PUBLIC_KEY": keys.server[0],
            "EMQ_CURVE_ADMIN_SECRET_KEY": keys.admin[1],
        },
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(done.stdout)
    assert summary["reachable"] is True
    assert summary["error"] == ""


def _refusal(keys: Keys, case: str) -> tuple[dict[str, str], list[str]]:
    """(the status command's environment, what its error must say) for one case."""
    server, stranger = keys.server[0], keys.stranger
    if case == "no-key":
        return {}, ["requires CURVE and this tool has no key", "EMQ_CURVE_ADMIN_SECRET_KEY"]
    if case == "wrong-admin-key":
        return (
            {"EMQ_CURVE_SERVER_PUBLIC_KEY": server, "EMQ_CURVE_ADMIN_SECRET_KEY": stranger[1]},
            [
                f"refused this tool's CURVE key {stranger[0]} (from CURVE_ADMIN_SECRET_KEY)",
                "add that public key to the router's CURVE_ADMIN_CLIENTS",
            ],
        )
    if case == "client-key":  # a client key opens the frontend, not the admin socket
        return (
            {"EMQ_CURVE_SERVER_PUBLIC_KEY": server, "EMQ_CURVE_CLIENT_SECRET_KEY": keys.client[1]},
            [f"refused this tool's CURVE key {keys.client[0]} (from CURVE_CLIENT_SECRET_KEY)"],
        )
    assert case == "wrong-router-key"
    return (
        {"EMQ_CURVE_SERVER_PUBLIC_KEY": stranger[0], "EMQ_CURVE_ADMIN_SECRET_KEY": keys.admin[1]},
        ["CURVE_SERVER_PUBLIC_KEY is probably not this router's public key"],
    )


@pytest.mark.parametrize("case", ["no-key", "wrong-admin-key", "client-key", "wrong-router-key"])
def test_status_without_the_right_key_is_refused_with_a_fix(
    keys: Keys, router: tuple[str, Proc], case: str
) -> None:
    admin, proc = router
    env, expected = _refusal(keys, case)
    done = run_status(admin, env)
    assert done.returncode == 1, done.stdout + done.stderr
    summary = json.loads(done.stdout)
    assert summary["reachable"] is False
    assert summary["error"].startswith("router unreachable: ")
    for text in expected:
        assert text in summary["error"]
    assert "no answer" not in summary["error"]
    # Refused, not broken: the admin key still gets STATUS.
    answer = admin_client.ask(admin, "STATUS", 10.0, settings=keys.peer_settings(keys.admin))
    assert "waiting_messages_by_queue" in answer
    assert proc.popen.poll() is None


def test_the_router_logs_a_refused_admin_key_once(keys: Keys, router: tuple[str, Proc]) -> None:
    admin, proc = router
    wrong = keys.peer_settings(keys.stranger)
    for _ in range(2):
        with pytest.raises(BrokerUnavailable, match="refused this tool's CURVE key"):
            admin_client.ask(admin, "STATUS", 10.0, settings=wrong)
    line = "admin: connection from 127.0.0.1 refused: public key not"
    # The refusal can reach us before the router's log line reaches its output.
    wait_for(lambda: line in proc.output(), 10, "the refusal in the router's log")
    assert proc.output().count(line) == 1


def test_the_routers_own_key_opens_its_admin_socket(keys: Keys, router: tuple[str, Proc]) -> None:
    admin, _proc = router
    on_router_host = from_mapping({"CURVE_SERVER_SECRET_KEY": keys.server[1]}, environ={})
    answer = admin_client.ask(admin, "MONITOR", 10.0, settings=on_router_host)
    assert "queued" in answer


def with_admin_key(eventmq_settings: Any, keys: Keys, admin: str) -> None:
    """The site's settings: this router, its public key and the admin key pair."""
    eventmq_settings(
        ADMIN_ADDR=admin,
        CURVE_SERVER_PUBLIC_KEY=keys.server[0],
        CURVE_ADMIN_SECRET_KEY=keys.admin[1],
    )


def test_emq_status_and_the_metrics_collector_take_keys_from_the_settings(
    keys: Keys, router: tuple[str, Proc], eventmq_settings: Any
) -> None:
    admin, _proc = router
    with_admin_key(eventmq_settings, keys, admin)
    out = io.StringIO()
    call_command("emq_status", json=True, timeout=float(DEADLINE), stdout=out)
    assert json.loads(out.getvalue())["reachable"] is True

    metrics = pytest.importorskip("django_eventmq.cli.metrics")
    families = {f.name: f for f in metrics.RouterAdminCollector(admin, timeout=10.0).collect()}
    assert families["emq_router_up"].samples[0].value == 1

    eventmq_settings(ADMIN_ADDR=admin)  # no keys
    out = io.StringIO()
    with pytest.raises(CommandError, match="the router did not answer"):
        call_command("emq_status", json=True, timeout=float(DEADLINE), stdout=out)
    assert "requires CURVE and this tool has no key" in json.loads(out.getvalue())["error"]
    families = {f.name: f for f in metrics.RouterAdminCollector(admin, timeout=10.0).collect()}
    assert families["emq_router_up"].samples[0].value == 0


@pytest.mark.django_db
def test_the_admin_dashboard_reads_a_curve_router(
    keys: Keys, router: tuple[str, Proc], admin_client: Any, eventmq_settings: Any
) -> None:
    admin, _proc = router
    admin_dashboard.samples.clear()
    url = reverse("admin:django_eventmq_dashboard_data")
    try:
        eventmq_settings(ADMIN_ADDR=admin)
        refused = admin_client.get(url).json()["router"]
        assert refused["reachable"] is False
        assert "requires CURVE" in refused["error"]
        eventmq_settings(
            ADMIN_ADDR=admin,
            CURVE_SERVER_PUBLIC_KEY=keys.server[0],
            CURVE_ADMIN_SECRET_KEY=keys.admin[1],
        )
        assert admin_client.get(url).json()["router"]["reachable"] is True
    finally:
        admin_dashboard.samples.clear()


def test_status_keeps_its_deadline_when_nothing_answers() -> None:
    # Nothing listens there: no handshake ever fails, so the deadline ends the wait.
    with pytest.raises(BrokerUnavailable, match=r"no answer to STATUS from .* within 0\.3s"):
        admin_client.ask(tcp_addr(), "STATUS", 0.3, settings=from_mapping({}, environ={}))


def test_a_remote_tool_refused_by_admin_local_only_is_told_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No CURVE, ADMIN_LOCAL_ONLY on. Every peer is made to look remote (tests have only
    127.0.0.1), so the ZAP handler refuses the tool."""
    plain = Settings()
    monkeypatch.setattr(security, "is_local", lambda address: False)
    with security.Guard(plain, ["admin"]):
        admin = Channel(
            transport.ROUTER,
            bind="tcp://127.0.0.1:*",
            options=security.secure_channel_options(plain, "admin", security.SERVER),
        )
        try:
            with pytest.raises(BrokerUnavailable, match="ADMIN_LOCAL_ONLY limits its admin"):
                admin_client.ask(admin.address, "STATUS", 20.0, settings=plain)
        finally:
            admin.close()


def test_a_keyed_tool_at_a_plain_admin_socket_is_told_why(keys: Keys) -> None:
    admin = Channel(transport.ROUTER, bind="tcp://127.0.0.1:*")
    try:
        with pytest.raises(BrokerUnavailable, match="does not speak CURVE"):
            admin_client.ask(admin.address, "STATUS", 20.0, settings=keys.peer_settings(keys.admin))
    finally:
        admin.close()


def test_system_check_reports_an_admin_key_without_the_routers_public_key(
    keys: Keys, settings: Any
) -> None:
    from django_eventmq.checks import check_settings

    settings.EVENTMQ = {"CURVE_ADMIN_SECRET_KEY": keys.admin[1]}
    (error,) = check_settings()
    assert error.id == "django_eventmq.E001"
    assert "CURVE_ADMIN_SECRET_KEY is set but CURVE_SERVER_PUBLIC_KEY is not" in error.msg
    settings.EVENTMQ = {
        "CURVE_ADMIN_SECRET_KEY": keys.admin[1],
        "CURVE_SERVER_PUBLIC_KEY": keys.server[0],
    }
    assert check_settings() == []


def test_a_curve_routers_metrics_endpoint_reads_its_admin_socket_with_its_own_key(
    keys: Keys,
) -> None:
    """``manage.py emq_router --metrics`` with keys: its collector asks its own admin
    socket, with the router's key pair (no admin key configured in that process)."""
    pytest.importorskip("prometheus_client")
    from tests.cli.test_metrics import scrape

    router = Proc(
        [sys.executable, str(ROOT / "manage.py"), "emq_router",
         "--frontend", tcp_addr(), "--backend", tcp_addr(), "--admin", tcp_addr(),
         "--no-journal", "--metrics", "127.0.0.1:0"],
        env={
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "EMQ_CURVE_SERVER_SECRET_KEY": keys.server[1],
            "EMQ_CURVE_FRONTEND_CLIENTS": keys.client[0],
            "EMQ_CURVE_BACKEND_WORKERS": keys.worker[0],
            "EMQ_CURVE_ADMIN_CLIENTS": keys.admin[0],
        },
    )  # fmt: skip
    try:
        url = router.wait_output(r"metrics at (http://\S+)").group(1)
        router.wait_output(r"router ready")
        samples = scrape(url)
        assert samples[("emq_router_up", ())] == 1
    finally:
        router.stop()


def test_with_curve_the_admin_key_is_the_proof_emq_status_stop_needs(
    keys: Keys, tmp_path: Any, eventmq_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No admin token is written or asked with CURVE on: ``emq_status --stop`` with the
    admin key (and no token file to read) stops the router, as before."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # the router's and ours
    with curve_router(keys, tmp_path / "journal.sqlite3") as (admin, proc):
        assert not list(tmp_path.glob("django-eventmq/*.token"))
        with_admin_key(eventmq_settings, keys, admin)
        out = io.StringIO()
        call_command("emq_status", stop=True, timeout=float(DEADLINE), stdout=out)
        assert f"router at {admin} is stopping" in out.getvalue()
        assert proc.popen.wait(30) == 0
