#!/usr/bin/env bash
# Create .venv with Python >= 3.12 (Django 6) and install into it what a command
# runs:
#   scripts/setup-venv.sh demo   the package and the example site's runtime
#                                (Django, pyzmq, croniter, django-environ): make demo
#   scripts/setup-venv.sh [test] all of that, the test and lint tools (Spark,
#                                Playwright, fuzzers, ...), and the reference
#                                eventmq 0.3.13 as an interop peer: make test
# One .venv for both: `make test` after `make demo` adds to what the demo
# installed. A stamp per level records what is there for this pyproject.toml and
# this script; the test stamp covers the demo too, the demo stamp never the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
level=${1:-test}
case "$level" in
    demo|test) ;;
    *) echo "usage: $0 [demo|test]" >&2; exit 2 ;;
esac

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
hash=$(cat pyproject.toml scripts/setup-venv.sh | sha1sum | cut -c1-12)
if [ -f ".venv/.installed-test-$hash" ] || [ -f ".venv/.installed-$level-$hash" ]; then
    exit 0
fi
pip=(.venv/bin/python -m pip install -q --disable-pip-version-check)
if [ "$level" = demo ]; then
    echo "==> installing django-eventmq and the example site's packages into .venv"
    "${pip[@]}" -e ".[example]"
else
    echo "==> installing django-eventmq and its test tools into .venv"
    "${pip[@]}" -e ".[test,lint]"
    # The reference implementation is only a test peer (tests/system/interop). Its
    # pins (pyzmq 18, croniter 0.3, ...) do not build on Python 3.12, so it is
    # installed without them, next to what it imports, in ONE --no-deps step:
    # a later resolving install would print "ERROR: pip's dependency resolver"
    # lines about those pins. It shares .venv because its job manager imports
    # the interop test jobs, which import django_eventmq.
    echo "==> installing the reference eventmq 0.3.13 as a test peer, without its old pins" \
        "(expected: 'pip check' lists them as conflicts)"
    "${pip[@]}" --no-deps "eventmq==0.3.13" six monotonic future
fi
rm -f .venv/.installed-*
touch ".venv/.installed-$level-$hash"
