"""@job refuses functions a job manager could never import."""

from __future__ import annotations

import pytest

from django_eventmq import job
from django_eventmq.errors import ConfigurationError


def test_nested_function_is_refused():
    def inner():
        return 1

    with pytest.raises(ConfigurationError, match="module-level function"):
        job(inner)


def test_main_module_function_is_refused():
    def f():
        return 1

    f.__module__ = "__main__"
    f.__qualname__ = "f"
    with pytest.raises(ConfigurationError, match="__main__"):
        job(f)


def test_empty_queue_is_refused():
    def g():
        return 1

    g.__qualname__ = "g"
    with pytest.raises(ConfigurationError, match="queue name is empty"):
        job(queue="")(g)
