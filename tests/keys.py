"""Key pairs and CURVE settings for the security tests (fresh keys per test module)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from django_eventmq.runtime import security
from django_eventmq.runtime.settings import Settings, from_mapping


@dataclass(frozen=True)
class Keys:
    """Z85 key pairs: the server's and one per kind of peer, plus an unknown one."""

    server: tuple[str, str]
    client: tuple[str, str]
    worker: tuple[str, str]
    admin: tuple[str, str]
    stranger: tuple[str, str]

    def server_settings(self, **extra: Any) -> Settings:
        """A router's/publisher's settings: CURVE on, each role with its own keys."""
        values: dict[str, Any] = {
            "CURVE_SERVER_SECRET_KEY": self.server[1],
            "CURVE_FRONTEND_CLIENTS": [self.client[0]],
            "CURVE_BACKEND_WORKERS": [self.worker[0]],
            "CURVE_ADMIN_CLIENTS": [self.admin[0]],
        }
        values.update(extra)
        return from_mapping(values, environ={})

    def peer_settings(self, pair: tuple[str, str], server_public: str | None = None) -> Settings:
        """A peer's settings: its own key pair and the server's public key."""
        return from_mapping(
            {
                "CURVE_SERVER_PUBLIC_KEY": server_public or self.server[0],
                "CURVE_CLIENT_SECRET_KEY": pair[1],
            },
            environ={},
        )


@pytest.fixture(scope="module")
def keys() -> Keys:
    return Keys(
        server=security.generate_keypair(),
        client=security.generate_keypair(),
        worker=security.generate_keypair(),
        admin=security.generate_keypair(),
        stranger=security.generate_keypair(),
    )
