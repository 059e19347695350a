#!/usr/bin/env bash
# Install what the tests need (.venv, packages, a running PostgreSQL) and run
# lint, type checks and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-venv.sh

# PostgreSQL runs on this machine kind; start it if it is down.
if command -v pg_isready >/dev/null && ! pg_isready -q -h 127.0.0.1 -p 5432; then
    echo "==> starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
fi

# The admin dashboard test drives Debian's Chromium with Playwright (never a
# downloaded browser). Install it when we can (root with apt-get).
if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "==> installing Debian's chromium for the browser tests"
    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; } \
        >/tmp/emq-apt-chromium.log 2>&1 \
        || echo "WARNING: chromium did not install (see /tmp/emq-apt-chromium.log); the browser test will be skipped"
fi

echo "==> ruff"
.venv/bin/ruff check django_eventmq tests benchmarks example_project
.venv/bin/ruff format --check django_eventmq tests benchmarks example_project
echo "==> mypy (strict, the whole package)"
.venv/bin/mypy
echo "==> pytest"
if [ "$#" -gt 0 ]; then
    exec .venv/bin/python -m pytest "$@"
fi
# The suite in EMQ_TEST_WORKERS processes (pytest-xdist; every Spark test in one
# of them, see tests/conftest.py). Nothing needs to run alone: a test that
# restarts PostgreSQL restarts a server of its own (tests/pg_support.py).
workers=${EMQ_TEST_WORKERS:-3}  # 3 beat 2 on 2 cores: 6.0 vs 8.5-9.7 min
exec .venv/bin/python -m pytest -n "$workers" --dist loadgroup
