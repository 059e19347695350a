"""A scripted eMQP router for client-side tests: a ROUTER socket in a thread whose
``answer(frames, n)`` gives the replies to the n-th message received."""

from __future__ import annotations

import threading
from collections.abc import Callable

import zmq

from django_eventmq.protocol.batch import unpack_jobs
from tests.support import tcp_addr

Answer = Callable[[list[bytes], int], list[list[bytes]]]


class ScriptedRouter:
    """Received messages (identity left out) are kept in ``received``.

    ``features_aside`` (the default): like the reference router it never
    answers FEATURES (kept in ``features``, not passed to ``answer``), so a
    pipeline sends it REQUESTs only.
    """

    def __init__(self, answer: Answer, *, features_aside: bool = True) -> None:
        self.addr = tcp_addr()
        self.answer = answer
        self.features_aside = features_aside
        self.received: list[list[bytes]] = []
        self.features: list[list[bytes]] = []
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ScriptedRouter:
        self._thread.start()
        assert self._ready.wait(5)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def batches(self) -> list[tuple[bytes, list[bytes]]]:
        """(batch msgid, job msgids) of every BATCH received, in order."""
        return [
            (f[3], [job[0] for job in unpack_jobs(f[4])]) for f in self.received if f[2] == b"BATCH"
        ]

    def _run(self) -> None:
        sock = zmq.Context.instance().socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.bind(self.addr)
            self._ready.set()
            while not self._stop.is_set():
                if not sock.poll(20):
                    continue
                frames = sock.recv_multipart()
                if self.features_aside and frames[3:4] == [b"FEATURES"]:
                    self.features.append(frames[1:])
                    continue
                self.received.append(frames[1:])
                for reply in self.answer(frames[1:], len(self.received)):
                    sock.send_multipart([frames[0], *reply])
        finally:
            sock.close(linger=0)
