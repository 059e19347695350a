"""Django settings for the test suite (SQLite by default, PostgreSQL with EMQ_TEST_DB=postgres)."""

from __future__ import annotations

import os

SECRET_KEY = "tests-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "tests.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_eventmq",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

if os.environ.get("EMQ_TEST_DB") == "postgres":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ.get("EMQ_TEST_PG_NAME", "test"),
            "USER": os.environ.get("EMQ_TEST_PG_USER", "postgres"),
            "HOST": os.environ.get("EMQ_TEST_PG_HOST", "127.0.0.1"),
            "PORT": os.environ.get("EMQ_TEST_PG_PORT", "5432"),
            # "none": persistent connections (tests of stale-connection handling).
            "CONN_MAX_AGE": (
                None
                if os.environ.get("EMQ_TEST_PG_CONN_MAX_AGE") == "none"
                else int(os.environ.get("EMQ_TEST_PG_CONN_MAX_AGE", "0"))
            ),
            "CONN_HEALTH_CHECKS": True,
        }
    }
else:
    DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}

EVENTMQ: dict[str, object] = {}

# The example project's app, so tests can exercise its jobs, views and
# migrations (tests/django/test_example.py).
INSTALLED_APPS += ["example_project.shop"]
INSTALLED_APPS += ["example_project.digests"]
