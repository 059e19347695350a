#!/usr/bin/env bash
# Bring the example site up on SQLite with a router and a job manager, queue
# jobs from its views and show them run (see example_project/demo.py).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-venv.sh demo
exec .venv/bin/python -m example_project.demo "$@"
