"""Inputs the fuzzers found that once escaped the decoder as something other than
ProtocolError (which would have taken a router down)."""

from __future__ import annotations

import base64

import pytest

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import decode

V = b"eMQP/1.0"


@pytest.mark.parametrize("interval", [b"inf", b"-inf", b"1e400", b"Infinity", b"nan"])
def test_schedule_interval_that_is_not_a_finite_number(interval: bytes) -> None:
    # Found by the live-router fuzz test and by atheris: int(float("1e400")) is OverflowError.
    for command in (b"SCHEDULE", b"UNSCHEDULE"):
        with pytest.raises(ProtocolError, match="interval"):
            decode([b"", V, command, b"id", b"q", b"", interval, b"{}", b""])


def test_atheris_crash_input_is_now_a_protocol_error() -> None:
    import importlib.util

    if importlib.util.find_spec("atheris") is None:
        pytest.skip("atheris is not installed")
    from tests.system.fuzz.fuzz_decoder import test_one_input

    # crash-188449633e5e3a4a6626dda30e6beac4d5084cda (libFuzzer's base64 of it)
    data = base64.b64decode(
        "o6cAADAwMDAwMDBwAAByaW9yaXR5MDAwMDAwMDAwMDE5MjA2NDMwMDI0MDk1NTcwMDI0MDk1NTc2MDM2MCAw"
        "MDAwMDAwMDAwMjQwOTU1NzAwMjQwOTU1RTYwMzA0MzEwMDQAeXh4eXul"
    )
    test_one_input(data)
