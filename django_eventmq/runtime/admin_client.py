"""Asking a running router's admin socket (``emq_status``, the admin dashboard, metrics).

Here in ``runtime/`` because processes of every kind ask: the command-line
tools, the Django web process (the dashboard, dead letters' poisoned jobs)
and a process serving ``--metrics``.

Admin tools connect with the CURVE key the settings give them (see
:func:`.security.client_secret_setting`); a router that refuses the handshake
is reported at once, with the setting to change, instead of after the timeout.
Never imports Django.

The tools read one router, or several: :func:`parse_admin_groups` reads a list
such as ``"tcp://a:47293,tcp://b:47293;tcp://c:47293"`` (``,`` between the
members of a router group, ``;`` between groups, i.e. shards).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from django_eventmq.errors import AdminRefused, BrokerUnavailable
from django_eventmq.protocol import Ack, AdminRequest, Message, Reply, new_msgid
from django_eventmq.protocol import constants as C
from django_eventmq.runtime import admin_token, config, security, transport
from django_eventmq.runtime.addresses import parse_groups
from django_eventmq.runtime.settings import Settings

#: Between the router groups (shards) of an admin address list; "," is between members.
GROUP_SEPARATOR = ";"

#: Milliseconds between looks at the handshake while waiting for an answer.
_HANDSHAKE_CHECK_MS = 50
#: Failed handshakes that say nothing clear before they count as a verdict (ZeroMQ
#: retries every 100 ms; a mechanism mismatch is sometimes unclear the first time).
_UNCLEAR_TRIES = 3


def _verdict(failures: list[str], *, final: bool) -> str | None:
    """The refusal the failed handshakes so far add up to, or None: keep waiting."""
    for clear in (transport.HANDSHAKE_AUTH, transport.HANDSHAKE_MECHANISM):
        if clear in failures:
            return clear
    if failures and (final or len(failures) >= _UNCLEAR_TRIES):
        return failures[-1]
    return None


def is_admin_list(value: str) -> bool:
    """Whether ``value`` names several admin addresses (else it is one, read as always)."""
    return "," in value or GROUP_SEPARATOR in value


def parse_admin_groups(value: str, setting: str) -> tuple[tuple[str, ...], ...]:
    """The admin addresses of each router group in ``value`` (``"a,b;c"``), in order, checked
    as peers' router lists are (:func:`.addresses.parse_groups`; errors name ``setting``)."""
    return parse_groups(value, setting)


def ask(
    admin_addr: str,
    command: str,
    timeout: float = 5.0,
    *,
    settings: Settings | None = None,
    arguments: Sequence[str] = (),
) -> dict[str, Any]:
    """Send one admin command (STATUS, MONITOR, ...) to a router; its JSON answer.

    Speaks CURVE when ``settings`` (default: this process's) give the router's
    public key. Raises :class:`BrokerUnavailable` when no answer comes within
    ``timeout`` or, sooner, when the router refuses the connection, and
    :class:`AdminRefused` when it refuses a state-changing command.
    """
    s = config.get_settings() if settings is None else settings
    message, sent_token = _exchange(admin_addr, command, timeout, s, arguments)
    if not isinstance(message, Reply):
        raise BrokerUnavailable(f"unexpected {message.command} from {admin_addr}")
    answer = json.loads(message.payload)
    if not isinstance(answer, dict):
        raise BrokerUnavailable(f"{command} answer from {admin_addr} is not an object")
    _check_refused(answer, admin_addr, sent_token)
    return answer


def stop_router(admin_addr: str, timeout: float = 5.0, *, settings: Settings | None = None) -> None:
    """DISCONNECT: the router says KBAI to its peers and stops (``status --stop``).
    Raises :class:`AdminRefused` without the router's admin token."""
    s = config.get_settings() if settings is None else settings
    message, sent_token = _exchange(admin_addr, C.DISCONNECT, timeout, s, ())
    if isinstance(message, Reply):  # a refusal; an ACK says it is stopping
        answer = json.loads(message.payload)
        _check_refused(answer if isinstance(answer, dict) else {}, admin_addr, sent_token)
    if not isinstance(message, Ack):
        raise BrokerUnavailable(f"unexpected {message.command} from {admin_addr}")


def _check_refused(answer: Mapping[str, Any], admin_addr: str, sent_token: str) -> None:
    if "refused" in answer:
        raise AdminRefused(f"the router at {admin_addr} {answer.get('error')} ({sent_token})")


def _exchange(
    admin_addr: str, command: str, timeout: float, s: Settings, arguments: Sequence[str]
) -> tuple[Message, str]:
    """Send ``command`` and wait for the answer; with it, what was said about the token
    (a state-changing command carries the router's admin token when it can be read)."""
    token, sent_token = "", "no admin token needed"
    if command in C.ADMIN_STATE_CHANGING:
        token, sent_token = admin_token.read_token(s, admin_addr)
    options = security.secure_channel_options(s, security.ADMIN, security.CLIENT)
    channel = transport.Channel(
        transport.DEALER, connect=admin_addr, options=options, watch_handshake=True
    )
    request = AdminRequest(
        msgid=new_msgid(), action=command, arguments=tuple(arguments), token=token
    )
    try:
        deadline = time.monotonic() + timeout
        failures: list[str] = []
        sent = False
        while True:
            sent = sent or send_now(channel, request)
            left_ms = int((deadline - time.monotonic()) * 1000)
            if channel.poll(max(0, min(left_ms, _HANDSHAKE_CHECK_MS))):
                break
            failures += channel.handshake_failures()
            verdict = _verdict(failures, final=left_ms <= 0)
            if verdict is not None:
                raise BrokerUnavailable(refusal(verdict, admin_addr, s))
            if left_ms <= 0:
                raise BrokerUnavailable(
                    f"no answer to {command} from {admin_addr} within {timeout}s"
                )
        _identity, _frames, message = channel.recv()
        return message, sent_token
    finally:
        channel.close()


def send_now(channel: transport.Channel, request: AdminRequest) -> bool:
    """Send ``request`` without waiting; False while the socket has no connection to
    queue it on. A router that refused the handshake leaves none: a plain send would
    then wait for ever, where the caller must see the refusal and its deadline."""
    try:
        channel.send(request, flags=transport.NOBLOCK)
    except transport.Again:
        return False
    return True


def refusal(failure: str, admin_addr: str, settings: Settings) -> str:
    """What a failed admin handshake (``transport.HANDSHAKE_*``) means, and how to fix it."""
    keyed = security.client_curve(settings)
    if failure == transport.HANDSHAKE_AUTH:
        if keyed:
            name = security.client_secret_setting(settings, security.ADMIN).upper()
            public, _secret = security.load_secret_key(getattr(settings, name.lower()), name)
            return (
                f"the router at {admin_addr} refused this tool's CURVE key "
                f"{public.decode('ascii')} (from {name}): add that public key to the "
                "router's CURVE_ADMIN_CLIENTS, or set CURVE_ADMIN_SECRET_KEY to a key listed "
                "there; with ADMIN_LOCAL_ONLY on (the default) the router also refuses "
                "other hosts"
            )
        return (
            f"the router at {admin_addr} refused this connection: ADMIN_LOCAL_ONLY limits its "
            "admin socket to its own host; run the tool there, or set ADMIN_LOCAL_ONLY=false "
            "on the router (and give admin tools CURVE keys)"
        )
    clear = failure == transport.HANDSHAKE_MECHANISM
    if keyed:
        if clear:
            return (
                f"the admin socket at {admin_addr} does not speak CURVE but this tool does "
                "(CURVE_SERVER_PUBLIC_KEY is set): is it the right router? Give the router "
                "CURVE_SERVER_SECRET_KEY, or unset CURVE_SERVER_PUBLIC_KEY here"
            )
        return (
            f"the CURVE handshake with {admin_addr} failed: CURVE_SERVER_PUBLIC_KEY is "
            "probably not this router's public key (or the router does not speak CURVE)"
        )
    # A plain tool whose handshake fails: the router speaks CURVE. ZeroMQ reports the
    # mismatch itself only when the server's greeting arrived before it hung up.
    fix = (
        "set EMQ_CURVE_SERVER_PUBLIC_KEY to the router's public key and "
        "EMQ_CURVE_ADMIN_SECRET_KEY to an admin secret key whose public key is in the "
        "router's CURVE_ADMIN_CLIENTS (make one with 'emq_keys admin')"
    )
    if clear:
        return f"the router at {admin_addr} requires CURVE and this tool has no key: {fix}"
    return (
        f"the handshake with {admin_addr} failed; most likely the router requires CURVE "
        f"and this tool has no key: {fix}"
    )


def format_monitor(info: Mapping[str, Any]) -> str:
    """MONITOR's answer as ``key: value`` lines (PZQ's monitor format), queues after."""
    keys = (
        "queued",
        "in_flight",
        "delayed",
        "poisoned",
        "store_bytes",
        "syncs",
        "expired",
        "jobs_expired",
        "rate_limited",
        "requeued",
        "duplicates",
        "rejected",
        "unique_keys",
        "unique_refused",
        "blocked",
        "held",
        "outbox_bytes",
        "outbox_clients",
        "outbox_budget",
        "clients_cut_off",
        "messages_dropped",
        "cancels_refused",
        "journal",
        "journal_failure",
    )
    lines = [f"{key}: {info.get(key)}" for key in keys if key in info]
    for queue, counts in sorted(info.get("per_queue", {}).items()):
        shown = " ".join(f"{k}={v}" for k, v in counts.items())
        lines.append(f"queue {queue}: {shown}")
    return "\n".join(lines)


def monitor(admin_addr: str, timeout: float = 5.0) -> str:
    """``emq_status --monitor``: the router's journal state as text."""
    return format_monitor(ask(admin_addr, C.MONITOR, timeout))


#: Msgids per POISONED_RETRY / POISONED_PURGE message (a message has at most 32 frames).
POISONED_BATCH = 25


def poisoned_jobs(
    admin_addr: str, timeout: float = 5.0, *, settings: Settings | None = None
) -> tuple[list[dict[str, Any]], int]:
    """The router's poisoned jobs (the first 100, oldest first) and how many it holds."""
    status = ask(admin_addr, C.STATUS, timeout, settings=settings)
    listed = status.get("poisoned_messages") or []
    return listed, int(status.get("poisoned_messages_total", len(listed)))


def act_on_poisoned(
    admin_addr: str,
    command: str,
    msgids: Sequence[str],
    timeout: float = 5.0,
    *,
    settings: Settings | None = None,
) -> list[str]:
    """POISONED_RETRY or POISONED_PURGE ``msgids``; the msgids the router found poisoned."""
    key = {C.POISONED_RETRY: "retried", C.POISONED_PURGE: "purged"}[command]
    done: list[str] = []
    for at in range(0, len(msgids), POISONED_BATCH):
        chunk = msgids[at : at + POISONED_BATCH]
        answer = ask(admin_addr, command, timeout, settings=settings, arguments=chunk)
        if key not in answer:
            raise BrokerUnavailable(
                f"the router at {admin_addr} did not {command} (a standby of a router group, "
                "or a router without poisoned-job commands): ask the group's leader"
            )
        done += [str(msgid) for msgid in answer[key]]
    return done
