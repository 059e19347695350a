"""What the five commands that run a process share: :class:`ProcessCommand`.

``emq_router``, ``emq_jobmanager``, ``emq_scheduler``, ``emq_pubsub`` and
``emq_subscribe`` each read the settings with their options applied, set up
logging, build their process, maybe serve ``--metrics`` beside it, and run
it until SIGTERM/SIGINT (:mod:`~django_eventmq.runtime.service` installs the
signal handlers). One of our errors anywhere on that way is one line
(:class:`CommandError`), not a traceback: :func:`command_errors`, which the
other commands use too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_eventmq import conf
from django_eventmq.cli import options as cli
from django_eventmq.errors import EventMQError
from django_eventmq.runtime.service import Service
from django_eventmq.runtime.settings import Settings


@contextlib.contextmanager
def command_errors() -> Iterator[None]:
    """Turn our errors (which say what to fix) into the command's one-line error."""
    try:
        yield
    except EventMQError as exc:
        raise CommandError(str(exc)) from None


class ProcessCommand(BaseCommand):
    """A command that runs one process; a subclass builds it in :meth:`make_service`.

    A command with ``--metrics`` also says what to serve (:meth:`metrics_registry`).
    """

    def make_service(self, settings: Settings, options: dict[str, Any]) -> Service:
        """The process to run, built from ``settings`` and the command's options."""
        raise NotImplementedError

    def metrics_registry(self, metrics: ModuleType, service: Service, settings: Settings) -> Any:
        """The Prometheus registry ``--metrics`` serves for ``service``."""
        raise NotImplementedError

    def handle(self, *args: Any, **options: Any) -> None:
        with command_errors():
            settings = conf.settings_with_options(options)
            # Before anything starts: --metrics without its extra is one line, not a traceback.
            metrics = cli.metrics_module() if options.get("metrics") else None
        cli.configure_logging(options["log_level"])
        with command_errors():
            service = self.make_service(settings, options)
            server = None
            if metrics is not None:
                registry = self.metrics_registry(metrics, service, settings)
                server = metrics.start_metrics_server(options["metrics"], registry)
        try:
            with command_errors():
                service.run()
        finally:
            if server is not None:
                server.close()
