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

echo "==> ruff"
.venv/bin/ruff check django_eventmq tests benchmarks example_project
.venv/bin/ruff format --check django_eventmq tests benchmarks example_project
echo "==> mypy (protocol/ and core/, strict)"
.venv/bin/mypy
echo "==> pytest"
exec .venv/bin/python -m pytest "$@"
