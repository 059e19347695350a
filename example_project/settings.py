"""Settings of the example site, read from the environment with django-environ.

Every value can come from the environment or a ``.env`` file next to
``manage.py``: ``DEBUG``, ``SECRET_KEY``, ``ALLOWED_HOSTS``, ``DATABASE_URL``
(default: SQLite file ``example_project/db.sqlite3``) and the ``EMQ_*``
variables django-eventmq reads itself (``EMQ_BROKER_ADDR``, ``EMQ_QUEUES``,
...), which win over ``EVENTMQ`` below.
"""

from __future__ import annotations

from pathlib import Path

try:
    import environ
except ImportError as exc:  # the package does not depend on it; its "example" extra does
    raise ImportError(
        "the example project reads its settings with django-environ: "
        "pip install -e '.[example]' (make demo installs it)"
    ) from exc

BASE_DIR = Path(__file__).resolve().parent

env = environ.Env(
    DEBUG=(bool, True),
    ALLOWED_HOSTS=(list, ["localhost", "127.0.0.1", "[::1]"]),
)
# A .env file (optional) fills os.environ, so EMQ_* set there reach
# django_eventmq.conf too.
environ.Env.read_env(BASE_DIR.parent / ".env")

DEBUG = env("DEBUG")
SECRET_KEY = env.str("SECRET_KEY", default="example-only-not-secret")
ALLOWED_HOSTS = env("ALLOWED_HOSTS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_eventmq",
    "example_project.shop",
    "example_project.digests",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example_project.urls"
WSGI_APPLICATION = "example_project.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
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

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Job processes and their results thread write to one file: take the write
    # lock when a transaction starts, and wait for it, instead of failing with
    # "database is locked" when a read-then-write transaction meets another writer.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"transaction_mode": "IMMEDIATE", "timeout": 20}
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"

# django-eventmq. The router and the job manager use the same settings:
#   python manage.py emq_router
#   python manage.py emq_jobmanager
EVENTMQ = {
    # The shop's queues: e-mails first, then reports, then anything else.
    "QUEUES": "email:30,reports:10,default:10",
    "CONCURRENCY": 2,
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        # propagate=False: worker processes may also have a root handler.
        "example_project": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}
