"""Which queue a job goes to when ``@job`` named none: the first ``ROUTES`` glob
matching its dotted name, else ``default`` (runtime/routes.py matches). Worked
out once per settings object (:mod:`.stages`, "queue")."""

from __future__ import annotations

from django_eventmq.protocol import constants as C
from django_eventmq.runtime import routes
from django_eventmq.runtime.settings import Settings


class Route:
    """Job ``name``'s queue under the ``ROUTES`` of the settings last asked about."""

    __slots__ = ("_routed", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        #: ``(settings, queue, its bytes)``: what ``ROUTES`` said under these settings.
        self._routed: tuple[Settings, str, bytes] | None = None

    def queue(self, settings: Settings) -> tuple[str, bytes]:
        """``(queue, its bytes)`` for ``settings``."""
        routed = self._routed
        if routed is None or routed[0] is not settings:
            queue = routes.route(self.name, settings.routes) or C.DEFAULT_QUEUE_NAME
            routed = self._routed = (settings, queue, queue.encode())
        return routed[1], routed[2]
