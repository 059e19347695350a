"""Key pair files for CURVE: ``emq_keys`` and ``python -m django_eventmq keys``.

Writes pyzmq's certificate format (``NAME.key`` public, ``NAME.key_secret``
secret, mode 0600), or prints Z85 keys for ``EMQ_*`` variables. Secret keys
never belong in the repository: a directory inside a git checkout gets a warning.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import zmq
import zmq.auth

from django_eventmq.errors import ConfigurationError


def generate_keypair() -> tuple[str, str]:
    """A new CURVE key pair as Z85 text: ``(public, secret)``."""
    public, secret = zmq.curve_keypair()
    return public.decode("ascii"), secret.decode("ascii")


def _inside_git_checkout(directory: Path) -> bool:
    return any((parent / ".git").exists() for parent in (directory, *directory.parents))


def make_keys(names: Sequence[str], directory: str | None, *, force: bool = False) -> list[str]:
    """Generate a key pair per name; returns the lines to print.

    With ``directory``, writes ``NAME.key`` (public) and ``NAME.key_secret``
    (secret, mode 0600) there; without, prints both keys as ``EMQ_*`` lines.
    """
    lines: list[str] = []
    if directory is None:
        for name in names:
            public, secret = generate_keypair()
            lines.append(f"# {name}")
            lines.append(f"{name}_public='{public}'")
            lines.append(f"{name}_secret='{secret}'")
        lines.append(
            "# Give a server EMQ_CURVE_SERVER_SECRET_KEY=<its secret>, each peer "
            "EMQ_CURVE_CLIENT_SECRET_KEY=<its secret> and EMQ_CURVE_SERVER_PUBLIC_KEY=<server's "
            "public>, and list the peers' public keys in EMQ_CURVE_FRONTEND_CLIENTS / "
            "EMQ_CURVE_BACKEND_WORKERS / EMQ_CURVE_ADMIN_CLIENTS."
        )
        return lines
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    for name in names:
        if not name or "/" in name or name.startswith("."):
            raise ConfigurationError(f"key name {name!r}: use a plain file name such as 'router'")
        public_path = target / f"{name}.key"
        secret_path = target / f"{name}.key_secret"
        if not force and (public_path.exists() or secret_path.exists()):
            raise ConfigurationError(
                f"{public_path} or {secret_path} exists; pass --force to replace the key pair"
            )
        public_file, secret_file = zmq.auth.create_certificates(target, name)
        os.chmod(secret_file, 0o600)
        public_key, _none = zmq.auth.load_certificate(public_file)
        lines.append(f"{name}: public key {public_key.decode('ascii')}")
        lines.append(f"  wrote {public_file} (public) and {secret_file} (secret, mode 600)")
    if _inside_git_checkout(target.resolve()):
        lines.append(
            f"WARNING: {target} is inside a git checkout: keep secret keys out of the "
            "repository (add them to .gitignore, or keep them elsewhere)"
        )
    return lines


def add_keys_arguments(parser: Any) -> None:
    """The options of ``emq_keys`` and ``python -m django_eventmq keys``."""
    parser.add_argument(
        "names",
        nargs="*",
        default=["router"],
        metavar="NAME",
        help="one key pair per name, e.g. router client jobmanager admin (default: router)",
    )
    parser.add_argument(
        "--dir",
        default=None,
        help="write key files into this directory (default: print Z85 keys instead)",
    )
    parser.add_argument("--force", action="store_true", help="replace existing key files")
