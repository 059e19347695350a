"""Django settings of the test consumer process: the test settings plus this app,
so ``emq_subscribe`` discovers ``tests/pubsub/subscribers.py`` on its own."""

from __future__ import annotations

from tests.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "tests.pubsub"]  # noqa: F405
