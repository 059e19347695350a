"""Loaded by every Python process started with this directory on PYTHONPATH:
installs the breakdown hooks when ``EMQ_BREAKDOWN_DIR`` is set (see
``benchmarks/_breakdown_hooks.py``), and does nothing otherwise."""

import os

if os.environ.get("EMQ_BREAKDOWN_DIR"):
    from benchmarks._breakdown_hooks import install

    install(os.environ["EMQ_BREAKDOWN_DIR"])
