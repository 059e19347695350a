#!/usr/bin/env bash
# Create .venv with Python >= 3.12 (Django 6) and install the project with its
# test and lint tools, plus the reference eventmq 0.3.13 as an interop peer.
set -euo pipefail
cd "$(dirname "$0")/.."

pick_python() {
    for candidate in "${PYTHON:-}" "$(pyenv which python3.12 2>/dev/null || true)" \
        "$(command -v python3.13 || true)" "$(command -v python3.12 || true)"; do
        if [ -n "$candidate" ] && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
            echo "$candidate"; return 0
        fi
    done
    echo "no Python >= 3.12 found: install one or set PYTHON=/path/to/python3.12" >&2
    return 1
}

if [ ! -x .venv/bin/python ]; then
    "$(pick_python)" -m venv .venv
fi
stamp=.venv/.installed-$(cat pyproject.toml scripts/setup-venv.sh | sha1sum | cut -c1-12)
if [ ! -f "$stamp" ]; then
    echo "==> installing django-eventmq and its test tools into .venv"
    .venv/bin/python -m pip install -q -e ".[test,lint]"
    # The reference implementation is only a test peer (tests/system/interop). Its
    # pins (pyzmq 18, croniter 0.3, ...) do not build on Python 3.12, so it is
    # installed without them, next to what it imports, in ONE --no-deps step:
    # a later resolving install would print "ERROR: pip's dependency resolver"
    # lines about those pins. It shares .venv because its job manager imports
    # the interop test jobs, which import django_eventmq.
    echo "==> installing the reference eventmq 0.3.13 as a test peer, without its old pins" \
        "(expected: 'pip check' lists them as conflicts)"
    .venv/bin/python -m pip install -q --no-deps "eventmq==0.3.13" six monotonic future
    rm -f .venv/.installed-*
    touch "$stamp"
fi
