"""The router's admin token: the proof a state-changing admin command carries.

Without CURVE the admin socket cannot tell who connects: any local process
could send DISCONNECT (the router stops) or POISONED_PURGE (jobs deleted).
So a router without CURVE writes a fresh random token at start to a file only
its user can read (mode 0600, in a directory only that user may use by
default), and accepts DISCONNECT, POISONED_RETRY and POISONED_PURGE only with
that token (compared in constant time). STATUS, MONITOR and ROUTER_SHOW_* stay
open. Admin tools of the same user (``emq_status``, the admin dashboard) read
the file and send the token with those commands only. With CURVE on the
admin key is the proof, as before, and no token is written or asked.
``ADMIN_TOKEN_REQUIRED = False`` lets the commands in without it (the
reference eventmq 0.3.13's admin tools send none). Never imports Django.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import os
import secrets
import stat
import tempfile

from django_eventmq.errors import ConfigurationError
from django_eventmq.protocol import AdminRequest, Reply, new_msgid
from django_eventmq.protocol import constants as C
from django_eventmq.runtime import security
from django_eventmq.runtime.outbox import WarnOnce, send
from django_eventmq.runtime.settings import Settings
from django_eventmq.runtime.transport import Channel

log = logging.getLogger("django_eventmq.security")

#: Random bytes in a token (written as hex: 64 characters).
TOKEN_BYTES = 32
#: Stands for the admin address in ``ADMIN_TOKEN_FILE``.
ADMIN_FIELD = "{admin}"


def address_tag(address: str) -> str:
    """``address`` as part of a file name: the port for TCP (``tcp-47293``: a tool may
    reach ``tcp://*:47293`` as ``127.0.0.1`` or ``localhost``), else the path made a name."""
    scheme, _sep, rest = address.partition("://")
    if scheme == "tcp":
        _host, _colon, port = rest.rpartition(":")
        return f"tcp-{port}"
    name = "".join(c if c.isalnum() or c in "._-" else "-" for c in rest).strip("-")
    return f"{scheme}-{name or 'admin'}"


def private_dir() -> str:
    """The default directory of token files: this user's runtime directory (or one in
    the temp directory), made if missing; refused unless only this user may use it."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isdir(runtime):
        path = os.path.join(runtime, "django-eventmq")
    else:
        path = os.path.join(tempfile.gettempdir(), f"django-eventmq-{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise ConfigurationError(f"ADMIN_TOKEN_FILE: cannot make {path}: {exc}") from None
    info = os.lstat(path)
    # Another user's directory (or a link to one) would let them read or swap tokens.
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise ConfigurationError(
            f"ADMIN_TOKEN_FILE: {path} is not a directory only this user may use (owner "
            f"uid {info.st_uid}, mode {stat.filemode(info.st_mode)}); remove it or set "
            "ADMIN_TOKEN_FILE to a file in a private directory"
        )
    return path


def token_path(settings: Settings, address: str) -> str:
    """The token file of the router whose admin socket is at ``address``."""
    template = settings.admin_token_file or os.path.join(private_dir(), "admin-{admin}.token")
    return template.replace(ADMIN_FIELD, address_tag(address))


def write_token(path: str) -> str:
    """A new token, written to ``path`` (mode 0600) in one step: a reader sees the whole
    old file or the whole new one, and a link at ``path`` is replaced, not followed."""
    token = secrets.token_hex(TOKEN_BYTES)
    directory, name = os.path.split(path)
    temporary = os.path.join(directory, f".{name}.{os.getpid()}.{secrets.token_hex(4)}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(temporary, flags, 0o600)
        try:
            os.write(fd, token.encode("ascii") + b"\n")
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise ConfigurationError(
            f"ADMIN_TOKEN_FILE: cannot write the admin token to {path}: {exc}"
        ) from None
    return token


def read_token(settings: Settings, address: str) -> tuple[str, str]:
    """``(token, why)`` for the router at ``address``: its token from the file, or ""
    and why there is none (said to the user when the router refuses)."""
    try:
        path = token_path(settings, address)
    except ConfigurationError as exc:
        return "", str(exc)
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            token = handle.read(4 * TOKEN_BYTES).strip()
    except OSError as exc:
        return "", f"this tool could not read the admin token {path}: {exc.strerror}"
    if not token:
        return "", f"the admin token file {path} is empty"
    return token, f"this tool sent the admin token from {path}"


def needs_token(settings: Settings) -> bool:
    """Whether a router with ``settings`` asks state-changing admin commands for a token."""
    return settings.admin_token_required and not security.server_curve(settings)


class AdminGate:
    """A router's admin token: written at :meth:`open`, asked of state-changing admin
    commands by :meth:`refusal`, removed at :meth:`close`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.required = needs_token(settings)
        #: The token file ("" while none is written).
        self.path = ""
        self._token = b""

    def open(self, address: str) -> None:
        """Write a new token for the admin socket bound at ``address`` (when one is asked)."""
        if not self.required or self._token:
            return
        path = token_path(self.settings, address)
        self._token = write_token(path).encode("ascii")
        self.path = path
        log.info(
            "admin token in %s: DISCONNECT and POISONED_* must carry it (ADMIN_TOKEN_FILE)", path
        )

    def refusal(self, request: AdminRequest) -> str | None:
        """Why ``request`` is refused (``"DISCONNECT without the admin token"``), or None:
        it may run."""
        if not self.required or request.action not in C.ADMIN_STATE_CHANGING:
            return None
        if not request.token:
            return f"{request.action} without the admin token"
        # Constant time: a wrong guess says nothing about how much of it was right.
        if not hmac.compare_digest(request.token.encode("utf-8", "replace"), self._token):
            return f"{request.action} with a token that is not this router's"
        return None

    def turn_away(
        self, admin: Channel, identity: bytes, request: AdminRequest, warn: WarnOnce
    ) -> bool:
        """Refuse ``request`` if it lacks the proof: one log line (per peer and reason)
        and an answer saying why and what to do; True when refused."""
        reason = self.refusal(request)
        if reason is None:
            return False
        warn("admin", identity, reason, "refused, nothing changed (ADMIN_TOKEN_FILE)")
        error = (
            f"refused {reason}: the router changed nothing. State-changing admin commands "
            f"need the token the router wrote to {self.path} (ADMIN_TOKEN_FILE); run the "
            "tool as the router's user, or see docs/security.md"
        )
        body = json.dumps({"refused": request.action, "error": error})
        send(admin, identity, Reply(msgid=new_msgid(), payload=body))
        return True

    def close(self) -> None:
        """Remove the token file, unless another router wrote its own there since."""
        path, token = self.path, self._token
        self.path, self._token = "", b""
        if not path:
            return
        try:
            with open(path, "rb") as handle:
                if handle.read(4 * TOKEN_BYTES).strip() != token:
                    return
            os.unlink(path)
        except OSError:
            return  # gone already, or not ours to remove
