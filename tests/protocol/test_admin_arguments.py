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


def test_the_admin_token_travels_before_the_arguments_and_never_shows_in_repr() -> None:
    sent = AdminRequest(msgid="id", action="POISONED_PURGE", arguments=("a",), token="s3cret")
    frames = encode(sent)
    assert frames[4:] == [b"admin-token:s3cret", b"a"]
    assert decode(frames, admin=True) == sent
    assert "s3cret" not in repr(sent) and "s3cret" not in str(sent)
    # DISCONNECT is an admin command on the admin socket (it may carry the token) ...
    stop = decode(encode(AdminRequest(msgid="id", action="DISCONNECT", token="t")), admin=True)
    assert (stop.action, stop.token) == ("DISCONNECT", "t")  # type: ignore[attr-defined]
    # ... and the spec's DISCONNECT elsewhere.
    assert type(decode([b"", b"eMQP/1.0", b"DISCONNECT", b"id"])).__name__ == "Disconnect"
