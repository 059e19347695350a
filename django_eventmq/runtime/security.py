"""CURVE encryption and authentication for the router, the publisher and their peers.

Configuring a server secret key switches CurveZMQ on: the router's frontend,
backend and admin sockets and the publisher's sockets then encrypt, and a ZAP
handler (one thread per process and ZeroMQ context) accepts only the client
public keys listed for that socket's role. Each role gets its own ZAP domain,
so a job manager's key opens the backend and nothing else. The admin domain
can also be limited to loopback and ``ipc://`` connections.

Components build their sockets with :func:`secure_channel_options` and, on the
server side, keep a :class:`Guard` started while the sockets are bound.
Keys are Z85 strings (``EMQ_*`` variables) or key files made by ``emq_keys``
(pyzmq's certificate format); they never belong in the repository.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85

from django_eventmq.errors import ConfigurationError
from django_eventmq.protocol.limits import Limits
from django_eventmq.runtime import transport
from django_eventmq.runtime.keyfiles import add_keys_arguments as add_keys_arguments
from django_eventmq.runtime.keyfiles import generate_keypair as generate_keypair
from django_eventmq.runtime.keyfiles import make_keys as make_keys
from django_eventmq.runtime.settings import Settings

log = logging.getLogger("django_eventmq.security")

FRONTEND = "frontend"
BACKEND = "backend"
ADMIN = "admin"
PUBLISHER = "publisher"
ROLES = (FRONTEND, BACKEND, ADMIN, PUBLISHER)
SERVER = "server"
CLIENT = "client"

#: Settings naming the public keys each server role accepts.
ALLOWED_SETTING = {
    FRONTEND: "curve_frontend_clients",
    BACKEND: "curve_backend_workers",
    ADMIN: "curve_admin_clients",
    PUBLISHER: "curve_publisher_clients",
}

_ZAP_VERSION = b"1.0"


# -- keys ---------------------------------------------------------------------


def _z85_key(text: str) -> bytes | None:
    """``text`` as a 40-byte Z85 key, or None when it is not one."""
    if len(text) != 40:
        return None
    try:
        raw = z85.decode(text.encode("ascii"))
    except (ValueError, UnicodeEncodeError, KeyError):
        return None
    return text.encode("ascii") if len(raw) == 32 else None


def _load_file(value: str, what: str) -> tuple[bytes, bytes | None]:
    path = Path(value)
    if not path.is_file():
        raise ConfigurationError(
            f"{what}: {value!r} is neither a Z85 key (40 characters) nor a key file"
        )
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"{what}: cannot read key file {value!r}: {exc}") from None
    if _z85_key(public.decode("ascii", "replace")) is None:
        raise ConfigurationError(f"{what}: key file {value!r} holds no valid public key")
    return public, secret


def load_public_key(value: str, what: str) -> bytes:
    """A public key (Z85 bytes) from a Z85 string or a key file."""
    key = _z85_key(value.strip())
    if key is not None and not os.path.exists(value):
        return key
    public, _secret = _load_file(value, what)
    return public


def load_secret_key(value: str, what: str) -> tuple[bytes, bytes]:
    """``(public, secret)`` (Z85 bytes) from a Z85 secret key or a ``.key_secret`` file."""
    key = _z85_key(value.strip())
    if key is not None and not os.path.exists(value):
        return zmq.curve_public(key), key
    public, secret = _load_file(value, what)
    if not secret:
        raise ConfigurationError(
            f"{what}: {value!r} holds no secret key (use the .key_secret file, not .key)"
        )
    return public, secret


def load_allowed_keys(entries: Iterable[str], what: str) -> frozenset[bytes]:
    """Public keys from Z85 strings, key files and directories of ``*.key`` files."""
    keys: set[bytes] = set()
    for entry in entries:
        if os.path.isdir(entry):
            try:
                found = zmq.auth.load_certificates(entry)
            except (OSError, ValueError) as exc:
                raise ConfigurationError(f"{what}: cannot read {entry!r}: {exc}") from None
            keys.update(k for k in found if _z85_key(k.decode("ascii", "replace")))
        else:
            keys.add(load_public_key(entry, what))
    return frozenset(keys)


# -- which sockets are secured, and how ----------------------------------------


def server_curve(settings: Settings) -> bool:
    """True when this process's server sockets (router, publisher) speak CURVE."""
    return bool(settings.curve_server_secret_key)


def client_curve(settings: Settings) -> bool:
    """True when this process's client sockets speak CURVE to their server."""
    return bool(settings.curve_server_public_key or settings.curve_server_secret_key)


def client_secret_setting(settings: Settings, role: str) -> str:
    """The setting holding the secret key this process connects to ``role`` with ("": none).

    Admin tools use ``curve_admin_secret_key``, else the process's client key, else (on
    the router's host) the router's own key, which its admin socket always accepts.
    """
    names: tuple[str, ...]
    if role == ADMIN:
        names = ("curve_admin_secret_key", "curve_client_secret_key", "curve_server_secret_key")
    else:
        names = ("curve_client_secret_key",)
    return next((name for name in names if getattr(settings, name)), "")


def allowed_keys(settings: Settings, role: str) -> frozenset[bytes]:
    """The public keys the server socket of ``role`` accepts (CURVE on)."""
    name = ALLOWED_SETTING[role]
    entries: Sequence[str] = getattr(settings, name)
    if role == PUBLISHER and not entries:
        name, entries = "curve_frontend_clients", settings.curve_frontend_clients
    keys = load_allowed_keys(entries, name.upper())
    if role == ADMIN:
        # The router's own key pair opens its admin socket: whoever holds the router's
        # secret key is the router anyway, and so its metrics endpoint and emq_status
        # on its host need no extra key.
        own, _secret = load_secret_key(settings.curve_server_secret_key, "CURVE_SERVER_SECRET_KEY")
        keys |= {own}
    if not keys:
        raise ConfigurationError(
            f"{name.upper()} is empty but CURVE_SERVER_SECRET_KEY is set: no peer could "
            f"connect to the {role} socket; list the public keys it should accept"
        )
    return keys


@dataclass(frozen=True, slots=True)
class Policy:
    """Who the ZAP handler lets in on one domain."""

    role: str
    #: Accepted CURVE public keys (Z85); None: the socket speaks NULL (no CURVE).
    keys: frozenset[bytes] | None
    #: Only loopback and ipc:// peers.
    local_only: bool


def policy(settings: Settings, role: str) -> Policy | None:
    """The ZAP policy of ``role``'s server socket, or None when it needs no ZAP."""
    local_only = role == ADMIN and settings.admin_local_only
    if server_curve(settings):
        return Policy(role, allowed_keys(settings, role), local_only)
    if local_only:
        return Policy(role, None, True)
    return None


def zap_domain(p: Policy) -> str:
    """The ZAP domain of a policy: the role plus a digest, so two routers with
    different keys in one process never share a domain."""
    digest = hashlib.sha256()
    for key in sorted(p.keys or ()):
        digest.update(key)
    digest.update(b"local" if p.local_only else b"any")
    digest.update(b"curve" if p.keys is not None else b"null")
    return f"eventmq-{p.role}-{digest.hexdigest()[:16]}"


def secure_channel_options(
    settings: Settings, role: str, side: str, *, ctx: zmq.Context[Any] | None = None
) -> dict[int, Any]:
    """Socket options for ``Channel(options=...)`` of ``role`` on ``side``.

    ``side`` is :data:`SERVER` (router/publisher sockets that bind) or
    :data:`CLIENT` (sockets that connect). Always sets ``MAXMSGSIZE``. A
    server socket that needs ZAP is refused unless a :class:`Guard` for this
    role is running in this process: without a ZAP handler ZeroMQ would let
    any key in.
    """
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {ROLES}")
    options: dict[int, Any] = {transport.MAXMSGSIZE: settings.max_message_bytes}
    if side == SERVER:
        p = policy(settings, role)
        if p is None:
            return options
        domain = zap_domain(p)
        if not _handler_serves(ctx or transport.context(), domain):
            raise ConfigurationError(
                f"the {role} socket needs ZAP authentication but no security.Guard serves it "
                "in this process: start Guard(settings, roles).start() before binding"
            )
        options[transport.ZAP_DOMAIN] = domain.encode()
        if p.keys is not None:
            _public, secret = load_secret_key(
                settings.curve_server_secret_key, "CURVE_SERVER_SECRET_KEY"
            )
            options[transport.CURVE_SERVER] = 1
            options[transport.CURVE_SECRETKEY] = secret
        return options
    if side != CLIENT:
        raise ValueError(f"unknown side {side!r}; expected {SERVER!r} or {CLIENT!r}")
    if not client_curve(settings):
        return options
    if settings.curve_server_public_key:
        server_public = load_public_key(settings.curve_server_public_key, "CURVE_SERVER_PUBLIC_KEY")
    else:
        server_public, _ = load_secret_key(
            settings.curve_server_secret_key, "CURVE_SERVER_SECRET_KEY"
        )
    name = client_secret_setting(settings, role)
    if not name:
        wanted = "CURVE_ADMIN_SECRET_KEY" if role == ADMIN else "CURVE_CLIENT_SECRET_KEY"
        raise ConfigurationError(
            f"CURVE_SERVER_PUBLIC_KEY is set but {wanted} is not: this process "
            "needs its own key pair (make one with 'manage.py emq_keys')"
        )
    public, secret = load_secret_key(getattr(settings, name), name.upper())
    if name == "curve_client_secret_key" and settings.curve_client_public_key:
        given = load_public_key(settings.curve_client_public_key, "CURVE_CLIENT_PUBLIC_KEY")
        if given != public:
            raise ConfigurationError(
                "CURVE_CLIENT_PUBLIC_KEY does not belong to CURVE_CLIENT_SECRET_KEY"
            )
    options[transport.CURVE_SERVERKEY] = server_public
    options[transport.CURVE_PUBLICKEY] = public
    options[transport.CURVE_SECRETKEY] = secret
    return options


def limits_from_settings(settings: Settings) -> Limits:
    """The :class:`Limits` a router applies, from its settings."""
    return Limits(
        max_frames=settings.max_frames,
        max_message_bytes=settings.max_frames * settings.max_message_bytes,
        max_body_bytes=settings.max_body_bytes,
        max_json_depth=settings.max_json_depth,
        max_retry_count=settings.max_retry_count,
        max_timeout=settings.max_timeout,
    )


# -- the ZAP handler --------------------------------------------------------------


def is_local(address: str) -> bool:
    """True for a loopback IP, and for ``""`` (ipc:// and inproc:// peers have no address)."""
    if not address:
        return True
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool(ip.is_loopback or (mapped is not None and mapped.is_loopback))


def decide(
    p: Policy | None, address: str, mechanism: bytes, credentials: Sequence[bytes]
) -> tuple[bool, str, str]:
    """``(allowed, reason, user id)`` for one ZAP request; pure, so it is tested directly."""
    if p is None:
        return False, "unknown ZAP domain", ""
    if p.local_only and not is_local(address):
        return False, "admin connections are limited to this host (ADMIN_LOCAL_ONLY)", ""
    if mechanism == b"CURVE":
        if p.keys is None or len(credentials) != 1 or len(credentials[0]) != 32:
            return False, "CURVE is not expected here", ""
        key = z85.encode(credentials[0])
        if key in p.keys:
            return True, "OK", key.decode("ascii")
        return False, "public key not allowed", ""
    if mechanism == b"NULL":
        if p.keys is None:
            return True, "OK", "anonymous"
        return False, "plain-text connection refused: CURVE is required", ""
    return False, f"mechanism {mechanism[:16]!r} not supported", ""


class _ZapHandler(ThreadAuthenticator):
    """pyzmq's ZAP thread with our per-domain policies instead of its global rules."""

    def __init__(self, context: zmq.Context[Any]) -> None:
        super().__init__(context=context, log=logging.getLogger("django_eventmq.security.zap"))
        #: domain -> (policy, number of guards using it); replaced whole, never mutated,
        #: so the ZAP thread reads it without a lock.
        self.policies: dict[str, tuple[Policy, int]] = {}
        self._warned: OrderedDict[tuple[str, str, str], None] = OrderedDict()

    async def handle_zap_message(self, msg: list[bytes]) -> None:
        if len(msg) < 6:
            if len(msg) >= 2:
                _version, request_id, *_rest = msg
                self._send_zap_reply(request_id, b"400", b"Not enough frames")
            return
        version, request_id, domain, address, _identity, mechanism = msg[:6]
        if version != _ZAP_VERSION:
            self._send_zap_reply(request_id, b"400", b"Invalid version")
            return
        entry = self.policies.get(domain.decode("utf-8", "replace"))
        text_address = address.decode("utf-8", "replace")
        allowed, reason, user = decide(
            entry[0] if entry else None, text_address, mechanism, msg[6:]
        )
        if allowed:
            self._send_zap_reply(request_id, b"200", b"OK", user)
            return
        self._refused(entry[0].role if entry else "?", text_address, reason)
        self._send_zap_reply(request_id, b"400", reason.encode())

    def _refused(self, role: str, address: str, reason: str) -> None:
        key = (role, address, reason)
        if key in self._warned:
            log.debug("%s: connection from %s refused: %s (again)", role, address, reason)
            return
        self._warned[key] = None
        if len(self._warned) > 1024:
            self._warned.popitem(last=False)
        log.warning("%s: connection from %s refused: %s", role, address or "ipc", reason)


_handlers: dict[int, tuple[zmq.Context[Any], _ZapHandler]] = {}
_handlers_lock = threading.Lock()


def _handler_serves(ctx: zmq.Context[Any], domain: str) -> bool:
    entry = _handlers.get(id(ctx))
    return entry is not None and entry[0] is ctx and domain in entry[1].policies


def _describe(p: Policy) -> str:
    how = f"CURVE, {len(p.keys)} key(s)" if p.keys is not None else "plain"
    return f"{p.role} ({how}{', local only' if p.local_only else ''})"


def _start_handler(ctx: zmq.Context[Any]) -> _ZapHandler:
    """Start a ZAP thread; waits out the previous one's endpoint, which ZeroMQ
    releases asynchronously after its socket closed."""
    deadline = time.monotonic() + 5.0
    while True:
        handler = _ZapHandler(ctx)
        try:
            handler.start()
        except zmq.ZMQError as exc:
            if handler.zap_socket is not None:
                handler.zap_socket.close(linger=0)
                handler.zap_socket = None  # type: ignore[assignment]
            if exc.errno != zmq.EADDRINUSE:
                raise
            if time.monotonic() > deadline:
                raise ConfigurationError(
                    "another ZAP handler is bound in this ZeroMQ context "
                    "(inproc://zeromq.zap.01); only one can serve a context"
                ) from None
            time.sleep(0.005)
        else:
            return handler


class Guard:
    """The ZAP policies of one component (router or publisher) in this process.

    ``start()`` before binding the sockets, ``stop()`` after closing them.
    Components in one process share one ZAP thread per ZeroMQ context.
    A Guard with nothing to enforce (no CURVE, admin not local-only) starts
    no thread.
    """

    def __init__(
        self,
        settings: Settings,
        roles: Sequence[str],
        *,
        ctx: zmq.Context[Any] | None = None,
    ) -> None:
        unknown = set(roles) - set(ROLES)
        if unknown:
            raise ValueError(f"unknown role(s) {sorted(unknown)}; expected some of {ROLES}")
        self.settings = settings
        self.roles = tuple(roles)
        self.ctx = ctx
        self._domains: dict[str, Policy] = {}

    @property
    def active(self) -> bool:
        return bool(self._domains)

    def start(self) -> None:
        """Load the keys and register this component's domains (idempotent)."""
        if self._domains:
            return
        domains: dict[str, Policy] = {}
        for role in self.roles:
            p = policy(self.settings, role)
            if p is not None:
                domains[zap_domain(p)] = p
        if not domains:
            return
        if server_curve(self.settings):
            # Fail now, with the setting's name, rather than at bind time.
            load_secret_key(self.settings.curve_server_secret_key, "CURVE_SERVER_SECRET_KEY")
        ctx = self.ctx or transport.context()
        with _handlers_lock:
            entry = _handlers.get(id(ctx))
            if entry is None or entry[0] is not ctx:
                handler = _start_handler(ctx)
                _handlers[id(ctx)] = (ctx, handler)
            else:
                handler = entry[1]
            table = dict(handler.policies)
            for domain, p in domains.items():
                _p, count = table.get(domain, (p, 0))
                table[domain] = (p, count + 1)
            handler.policies = table
        self._domains = domains
        log.info("ZAP authentication on for %s", ", ".join(map(_describe, domains.values())))

    def stop(self) -> None:
        """Unregister this component's domains; the last one out stops the thread."""
        if not self._domains:
            return
        ctx = self.ctx or transport.context()
        with _handlers_lock:
            entry = _handlers.get(id(ctx))
            if entry is not None and entry[0] is ctx:
                handler = entry[1]
                table = dict(handler.policies)
                for domain in self._domains:
                    p, count = table.get(domain, (None, 0))
                    if count <= 1:
                        table.pop(domain, None)
                    elif p is not None:
                        table[domain] = (p, count - 1)
                handler.policies = table
                if not table:
                    del _handlers[id(ctx)]
                    handler.stop()
        self._domains = {}

    def __enter__(self) -> Guard:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
