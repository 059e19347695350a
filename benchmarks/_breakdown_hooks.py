"""Timestamps at the hops of one job's path, for ``latency_breakdown.py``.

:func:`install` wraps a few functions of the running process (only when the
benchmark asks, through ``benchmarks/_breakdown_site/sitecustomize.py`` and
``EMQ_BREAKDOWN_DIR``): each call appends ``TAG MONOTONIC_NS`` to a file
named for the process id in that directory. One ``os.write`` per event (about
2 us; some fifteen per job in the three processes): a worker process may end
without running ``atexit`` handlers, and the figures keep every event that
happened.

Tags, in the order of a job's path: ``wake`` (a ``zmq.Poller`` poll returned
something: the router's and the job manager's loops, which use one each, and
anything else that polls with one), ``hand`` (the router sent jobs to a job
manager: a send made while :class:`~django_eventmq.router.hand_outs.HandOuts`
sends its jobs; every other send on any channel, an ACK or a reply to a
client, a heartbeat, is ``send``), ``pipew`` (the job manager wrote to a
worker's pipe), ``piper`` (a worker read a frame). After the hand-out, in the
same router loop iteration, the journal commit that stores the job: ``c0``
and ``c1`` (it began and returned), ``e0`` (``_end`` began: the kept writes
are applied, the COMMIT follows, with the finished-msgid prune or the commit
mark when they are due).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from typing import Any

#: The environment variable naming the directory the events go to.
ENV = "EMQ_BREAKDOWN_DIR"


class _Events:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.fd: int | None = None

    def record(self, tag: str) -> None:
        now = time.monotonic_ns()
        if self.fd is None:  # opened lazily: the pid after a fork or spawn
            path = os.path.join(self.directory, str(os.getpid()))
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(self.fd, f"{tag} {now}\n".encode())


def _wrap(
    owner: Any,
    name: str,
    events: _Events,
    before: str | None = None,
    after: str | None = None,
    when: Callable[[Any], bool] = bool,
) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if before is not None:
            events.record(before)
        result = original(*args, **kwargs)
        if after is not None and when(result):
            events.record(after)
        return result

    setattr(owner, name, wrapped)


def _tag_sends(events: _Events) -> None:
    """Record each send as ``hand`` while the router's hand-outs send jobs to a job
    manager, else as ``send``: the breakdown must not take an ACK or a reply to
    a client, sent in between, for the job's hand-out."""
    from django_eventmq.router.hand_outs import HandOuts
    from django_eventmq.runtime import transport

    send_frames = transport.Channel.send_frames
    send_jobs = HandOuts._send_jobs
    handing = False

    @functools.wraps(send_frames)
    def tagged_send_frames(*args: Any, **kwargs: Any) -> Any:
        events.record("hand" if handing else "send")
        return send_frames(*args, **kwargs)

    @functools.wraps(send_jobs)
    def marked_send_jobs(*args: Any, **kwargs: Any) -> Any:
        nonlocal handing
        handing = True
        try:
            return send_jobs(*args, **kwargs)
        finally:
            handing = False

    transport.Channel.send_frames = tagged_send_frames  # type: ignore[method-assign]
    HandOuts._send_jobs = marked_send_jobs  # type: ignore[method-assign]


def install(directory: str) -> None:
    """Wrap the hop functions; events go to ``directory``/PID."""
    from django_eventmq.jobmanager import pipe
    from django_eventmq.router.journal import commit
    from django_eventmq.runtime import transport

    events = _Events(directory)
    _tag_sends(events)
    # transport.FdPoller is zmq.Poller, which transport.Poller polls with: one wrap.
    _wrap(transport.FdPoller, "poll", events, after="wake")
    _wrap(pipe, "write_all", events, before="pipew")
    _wrap(pipe.FrameReader, "read", events, after="piper")
    _wrap(commit.JournalBase, "commit", events, before="c0", after="c1", when=lambda _: True)
    _wrap(commit.JournalBase, "_end", events, before="e0")
