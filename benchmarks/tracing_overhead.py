"""What tracing costs: the send path with tracing off (the default) and on.

    .venv/bin/python benchmarks/tracing_overhead.py [--jobs 20000] [--rounds 3]

Prints, per job:

- the tracing hook of ``Job.delay()`` alone (``with tracing.sending(...)``)
  while tracing is off, and the router's checks on an untraced job (the accept
  path's look at its extension headers, the hand-out path's ``tracing.ON``), in ns, next to a
  bare function call as a yardstick of the machine's speed;
- ``noop.delay()`` into a real router (no job manager), in µs, with tracing off
  and with an SDK tracer provider set (spans made, then dropped), rounds
  interleaved so the machine's noise hits both alike.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import timeit
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._peers import start_router_only


def _ns(statement: str, namespace: dict[str, object], number: int = 200_000) -> float:
    best = min(timeit.repeat(statement, globals=namespace, number=number, repeat=5))
    return best / number * 1e9


def hooks_off() -> dict[str, float]:
    """ns per call of each hook while no tracer provider is set."""
    from django_eventmq.runtime import tracing

    tracing.set_tracer_provider(None)
    assert tracing.tracer() is None
    from django_eventmq.protocol import parse_headers

    headers = parse_headers("guarantee,timeout:30")
    namespace: dict[str, object] = {"tracing": tracing, "h": headers.encode().encode()}
    namespace["headers"] = headers
    namespace["f"] = lambda: None
    send = (  # what Job.delay() does around its send
        "span = tracing.send_span('default', 'm', 'j')\n"
        "if span is not None:\n"
        "    h = tracing.stamped(h, span.stamp)\n"
        "try:\n"
        "    pass\n"
        "finally:\n"
        "    if span is not None:\n"
        "        span.end()"
    )
    not_loaded = _ns(send, namespace)
    importlib.import_module("opentelemetry.trace")  # loaded, but no provider set
    return {
        "a bare function call (yardstick)": _ns("f()", namespace),
        "send hook, off (OTel not loaded)": not_loaded,
        "send hook, off (no provider)": _ns(send, namespace),
        "router accept check": _ns("headers.extra", namespace),
        "router hand-out check": _ns("tracing.ON", namespace),
    }


def _delay(count: int) -> float:
    from benchmarks.noop_jobs import noop

    start = time.perf_counter()
    for i in range(count):
        noop.delay(i)
    return (time.perf_counter() - start) / count * 1e6


def send_path(jobs: int, rounds: int) -> dict[str, float]:
    """µs per ``noop.delay()``, tracing off and on (best round of each)."""
    from opentelemetry.sdk.trace import TracerProvider

    from benchmarks._client_compat import close_clients
    from django_eventmq.runtime import config, tracing

    router, frontend, _admin = start_router_only()
    os.environ["EMQ_BROKER_ADDR"] = frontend
    config.reset()
    provider = TracerProvider()  # no processor: spans are made and dropped
    best = {"off": float("inf"), "on": float("inf")}
    try:
        _delay(500)  # connect and warm up
        for _ in range(rounds):
            tracing.set_tracer_provider(None)
            best["off"] = min(best["off"], _delay(jobs))
            tracing.set_tracer_provider(provider)
            best["on"] = min(best["on"], _delay(jobs))
    finally:
        tracing.set_tracer_provider(None)
        close_clients()
        router.stop()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per round and mode")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    hooks = hooks_off()
    for name, ns in hooks.items():
        print(f"{name:34} {ns:8.0f} ns")
    delay = send_path(args.jobs, args.rounds)
    print(f"{'noop.delay(), tracing off':34} {delay['off']:8.2f} µs")
    print(f"{'noop.delay(), tracing on (SDK)':34} {delay['on']:8.2f} µs")
    share = hooks["send hook, off (no provider)"] / (delay["off"] * 1000)
    print(f"the send hook is {share:.1%} of a .delay() with tracing off")


if __name__ == "__main__":
    main()
