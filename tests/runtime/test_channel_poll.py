"""Channel.poll: with a timeout, on an open socket and on a closed one."""

from __future__ import annotations

import pytest
import zmq

from django_eventmq.runtime import transport


def test_poll_waits_for_a_message_and_says_when_one_is_there():
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        reader = transport.Channel(transport.DEALER, bind="inproc://poll-test", ctx=ctx)
        writer = ctx.socket(zmq.DEALER)
        writer.connect("inproc://poll-test")
        assert reader.poll(10) is False
        writer.send(b"x")
        assert reader.poll(5000) is True
        assert reader.poll(0) is True
        writer.close(linger=0)
        reader.close()
    finally:
        ctx.term()


def test_poll_on_a_closed_channel_raises_instead_of_polling_stdin():
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        channel = transport.Channel(transport.DEALER, bind="inproc://poll-closed", ctx=ctx)
        channel.close()
        with pytest.raises(zmq.ZMQError) as raised:
            channel.poll(50)
        assert raised.value.errno == zmq.ENOTSUP
    finally:
        ctx.term()
