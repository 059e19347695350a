"""Logging for the commands: ``django_eventmq.*`` to stderr, one handler however often it is set up.

Never imports Django.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from django_eventmq.cli.arg_types import log_level

#: INFO shows start-up and shutdown lines only: components log nothing per message at INFO.
DEFAULT_LOG_LEVEL = "INFO"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _StderrHandler(logging.StreamHandler[TextIO]):
    """The handler :func:`configure_logging` installs (found again to avoid doubles)."""


def configure_logging(level: str = DEFAULT_LOG_LEVEL) -> logging.Logger:
    """Log ``django_eventmq.*`` to stderr with time, level and logger name; returns the logger.

    Calling it again replaces its handler rather than adding a second one.
    """
    logger = logging.getLogger("django_eventmq")
    for handler in list(logger.handlers):
        if isinstance(handler, _StderrHandler):
            logger.removeHandler(handler)
    handler = _StderrHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logger.addHandler(handler)
    logger.setLevel(log_level(level))
    # Our handler is the one that prints: don't print every line twice
    # through a root handler someone else configured.
    logger.propagate = False
    return logger
