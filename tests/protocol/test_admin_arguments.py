"""Admin commands with arguments (POISONED_RETRY / POISONED_PURGE carry msgids) survive
encoding and decoding; only the admin socket decodes them."""

from __future__ import annotations

import pytest

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import AdminRequest, decode, encode


def test_the_msgids_of_a_poisoned_job_command_come_back_as_sent() -> None:
    sent = AdminRequest(msgid="id", action="POISONED_RETRY", arguments=("a", "b"))
    assert decode(encode(sent), admin=True) == sent
    assert decode(encode(AdminRequest(msgid="id", action="STATUS")), admin=True).body() == []


def test_a_poisoned_job_command_is_no_command_outside_the_admin_socket() -> None:
    frames = encode(AdminRequest(msgid="id", action="POISONED_PURGE", arguments=("a",)))
    with pytest.raises(ProtocolError, match="unknown command"):
        decode(frames)
