"""Send many REQUESTs to a router with a window of them in flight, each acknowledged once.

This is the executor side of the Spark integration, and needs nothing but
pyzmq. A Spark task makes one :class:`PipelinedSender`, feeds it pre-encoded
REQUESTs and calls :meth:`~PipelinedSender.flush`: it returns once the router
has acknowledged (ACK) or refused (REJECT) every msgid. A REQUEST that is not
answered within ``ack_timeout`` is sent again *with the same msgid*: the
router runs a msgid once, so a resend (or a whole Spark task attempt sent
again) cannot double a job. The window itself is the client's
:class:`~django_eventmq.client.bulk.Pipeline`; this module gives it a
socket of its own. Against a router of ours the jobs go in BATCH messages
(up to ``batch`` jobs each, one ACK per batch) once the router has answered
the pipeline's FEATURES, which makes a partition's rows much cheaper for the
router to take; against the reference router they stay REQUESTs.

With CURVE keys in the settings (by default the executor's ``EMQ_*``
environment) the socket speaks CURVE to the router's frontend, as a client.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django_eventmq.client.bulk import (
    DEFAULT_ACK_TIMEOUT,
    DEFAULT_BATCH,
    DEFAULT_GIVE_UP,
    DEFAULT_WINDOW,
    FEATURES_WAIT,
    READ_EVERY,
    REASONS_KEPT,
    Pipeline,
    QueueCounts,
    check_window,
)
from django_eventmq.client.connection import client_options
from django_eventmq.runtime import transport
from django_eventmq.runtime.settings import Settings, from_mapping

__all__ = [
    "DEFAULT_ACK_TIMEOUT",
    "DEFAULT_BATCH",
    "DEFAULT_GIVE_UP",
    "DEFAULT_WINDOW",
    "READ_EVERY",
    "REASONS_KEPT",
    "PipelinedSender",
    "QueueCounts",
]

log = logging.getLogger("django_eventmq.spark")


class PipelinedSender(Pipeline):
    """A DEALER of its own that keeps up to ``window`` REQUESTs in flight and resends the
    silent ones.

    Make it in the process and thread that use it (a Spark task), and close it.
    """

    def __init__(
        self,
        addr: str,
        *,
        window: int = DEFAULT_WINDOW,
        ack_timeout: float = DEFAULT_ACK_TIMEOUT,
        give_up: float = DEFAULT_GIVE_UP,
        batch: int = DEFAULT_BATCH,
        identity_prefix: str = "spark-",
        clock: Callable[[], float] = time.monotonic,
        on_wait: Callable[[], object] | None = None,
        settings: Settings | None = None,
    ) -> None:
        """Connect to ``addr``; ``settings`` (default: from ``EMQ_*``) give the CURVE keys."""
        check_window(window, ack_timeout, give_up, batch)  # before a socket exists
        channel = transport.Channel(
            transport.DEALER,
            connect=addr,
            # Room for the whole window: sends only block on a router that
            # stopped reading, and then the pipeline notices.
            hwm=window + READ_EVERY,
            identity=transport.new_identity(identity_prefix),
            # Connected but unanswered for give_up: the router is full, not gone.
            watch_peer=True,
            options=client_options(settings if settings is not None else from_mapping()),
        )
        super().__init__(
            channel,
            addr=addr,
            window=window,
            ack_timeout=ack_timeout,
            give_up=give_up,
            batch=batch,
            # BATCHes cut at the same places from the first job: a retried task's
            # are recognised whole by the router (parcels).
            features_wait=FEATURES_WAIT,
            clock=clock,
            on_wait=on_wait,
            logger=log,
        )

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> PipelinedSender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
