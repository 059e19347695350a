"""Django settings the django-stubs mypy plugin sets up (pyproject ``[tool.django-stubs]``).

The plugin imports the installed apps' models to learn their fields, managers
and relations; that is all it needs. The app's ``ready()`` (settings wiring,
checks, ``jobs`` discovery) and the admin's autodiscovery are left out, so a
type check depends on the models importing, not on the whole package.
"""

from __future__ import annotations

from django_eventmq.apps import DjangoEventMQConfig

SECRET_KEY = "mypy-only-not-secret"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "tests.django.mypy_settings.ModelsOnlyConfig",
]


class ModelsOnlyConfig(DjangoEventMQConfig):
    """``django_eventmq`` with its models and nothing run at start-up."""

    def ready(self) -> None:
        pass
