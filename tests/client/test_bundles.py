"""Our client reads bundles of ACKs (protocol/bundle.py): each ACK as if it came alone.

The router's side: tests/router/test_bundles.py.
"""

from __future__ import annotations

import logging

import pytest

from django_eventmq.client.connection import Client
from django_eventmq.protocol.bundle import bundle
from django_eventmq.protocol.frame_fields import ack_frames
from tests.fake_router import ScriptedRouter
from tests.router.test_router import JOB
from tests.support import wait_for

V = b"eMQP/1.0"
JOB_B = JOB.encode()


def _acks_in_one_bundle(frames: list[bytes], n: int) -> list[list[bytes]]:
    """A router that answers the REQUEST m-2 with the ACKs of m-1 and m-2 in one bundle."""
    if frames[2:4] == [b"REQUEST", b"m-2"]:
        return [[bundle([ack_frames(b"a-1", b"m-1"), ack_frames(b"a-2", b"m-2")])]]
    return []


def test_a_guaranteed_send_returns_on_its_ack_inside_a_bundle() -> None:
    with ScriptedRouter(_acks_in_one_bundle) as router:
        client = Client(router.addr)
        try:
            client.send_request_frames(b"m-1", b"default", b"", JOB_B)
            client.send_request_guaranteed(
                b"m-2", b"default", b"guarantee", JOB_B, ack_timeout=5.0, retries=0
            )
        finally:
            client.close()


def _malformed_then_ack(frames: list[bytes], n: int) -> list[list[bytes]]:
    if frames[2:4] == [b"REQUEST", b"m-1"]:
        return [[b"B1,0\n"], ack_frames(b"a-1", b"m-1")]
    return []


def test_a_malformed_bundle_is_logged_and_ignored(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="django_eventmq")
    with ScriptedRouter(_malformed_then_ack) as router:
        client = Client(router.addr)
        try:
            client.send_request_guaranteed(
                b"m-1", b"default", b"guarantee", JOB_B, ack_timeout=5.0, retries=0
            )
        finally:
            client.close()
    wait_for(lambda: any("malformed bundle" in r.getMessage() for r in caplog.records))


def _nested_bundles_then_ack(frames: list[bytes], n: int) -> list[list[bytes]]:
    """Bundles nested 2,000 deep (a router gone wrong), then the real ACK."""
    if frames[2:4] == [b"REQUEST", b"m-1"]:
        nested = bundle([ack_frames(b"a-0", b"m-0")])
        for _ in range(2000):
            nested = bundle([[nested]])
        return [[nested], ack_frames(b"a-1", b"m-1")]
    return []


def test_a_bundle_inside_a_bundle_is_malformed_not_recursed_into(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="django_eventmq")
    with ScriptedRouter(_nested_bundles_then_ack) as router:
        client = Client(router.addr)
        try:  # before: RecursionError in the client's reader
            client.send_request_guaranteed(
                b"m-1", b"default", b"guarantee", JOB_B, ack_timeout=5.0, retries=0
            )
        finally:
            client.close()
    wait_for(lambda: any("malformed message" in r.getMessage() for r in caplog.records))


def test_a_client_announces_the_largest_frame_its_socket_takes() -> None:
    from django_eventmq.client.handshake import client_features
    from django_eventmq.protocol.bundle import BUNDLE
    from django_eventmq.runtime import transport

    with ScriptedRouter(lambda frames, n: []) as router:
        client = Client(router.addr, options={transport.MAXMSGSIZE: 300_000})
        try:
            # Our router cuts the ACK bundles it sends us there (a bigger frame
            # would cost us the connection).
            assert client.session.our_features[BUNDLE] == 300_000
            assert client_features(client.channel)[BUNDLE] == 300_000
        finally:
            client.close()
