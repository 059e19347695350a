"""Per-process span export for the tracing tests (put this directory on PYTHONPATH).

With ``TRACE_PROBE_DIR`` set, every Python process that starts (a router, a
job manager, its spawned worker children) installs an OpenTelemetry SDK
tracer provider whose finished spans are appended at once, one JSON line
each, to ``$TRACE_PROBE_DIR/spans-<pid>.jsonl`` (a killed process keeps what
it wrote). Without it this module does nothing.
"""

from __future__ import annotations

import os

if os.environ.get("TRACE_PROBE_DIR"):
    from tests.tracing_probe.export import install

    install(os.environ["TRACE_PROBE_DIR"])
