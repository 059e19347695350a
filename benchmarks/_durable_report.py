"""Issue 32's report: the table of ``durable_peers.py``'s figures and the verdicts.

No processes, no sockets: tests/benchmarks/test_durable_report.py checks the
verdicts, the ratios and the skip lines on made-up figures. The shape read
here is what :func:`benchmarks.durable_peers.run` returns: ``durable`` (each
system's ``one`` and ``threads`` runs, and the floor's ``one``, ``threads``
and ``plain``), ``plain`` (``throughput.py``'s ours and Huey end to end),
``latency`` (``huey``, ``ours``, ``floor``) and ``skipped`` (name: why).
"""

from __future__ import annotations

from typing import Any

from benchmarks._summary import Target

#: The durable systems, ours first, as the report names them.
PEERS = {
    "ours": "ours, @job(guarantee=True)",
    "huey": "Huey + Redis, appendfsync always",
    "celery": "Celery 5 + RabbitMQ, confirms, acks_late",
    "dramatiq": "Dramatiq + RabbitMQ, confirm_delivery",
}
#: Issue 32's targets: ours over the best durable peer, one sender one at a
#: time and with 8 threads; ours over Huey end to end with plain ``.delay()``.
TARGET_ONE = 2.0
TARGET_THREADS = 5.0
TARGET_PLAIN_OVER_HUEY = 4.0


def skip_lines(skipped: dict[str, str]) -> list[str]:
    """One line per peer that could not run, saying why."""
    return [f"{PEERS.get(name, name)}: skipped, {why}" for name, why in skipped.items()]


def _rate(results: dict[str, Any], name: str, mode: str) -> float | None:
    block = results.get("durable", {}).get(name)
    return None if not block or mode not in block else float(block[mode]["per_second"])


def best_peer(results: dict[str, Any], mode: str) -> tuple[str, float] | None:
    """The fastest durable peer (not ours) in ``mode`` (``one`` or ``threads``)."""
    rates = [(n, r) for n in PEERS if n != "ours" and (r := _rate(results, n, mode))]
    return max(rates, key=lambda item: item[1]) if rates else None


def _over(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def _start(results: dict[str, Any], system: str, run: str, stat: str) -> float | None:
    block = results.get("latency", {}).get(system, {}).get(run)
    return None if block is None else float(block["start"][stat])


def targets(results: dict[str, Any]) -> list[Target]:
    """Every target of issue 32, judged on one run's figures (ratios in that run)."""
    threads = int(results.get("threads", 8))
    found: list[Target] = []
    for mode, goal, what in (
        ("one", TARGET_ONE, "one sender, one at a time"),
        ("threads", TARGET_THREADS, f"{threads} sending threads"),
    ):
        best = best_peer(results, mode)
        label = f"guaranteed, {what}: ours / best durable peer"
        if best:
            label += f" ({PEERS[best[0]].split(',')[0]})"
        found.append(
            Target(label, _over(_rate(results, "ours", mode), best and best[1]), goal, unit="x")
        )
    for run, where in (("low_load", "low load"), ("half_peak", "half Huey's peak")):
        for stat in ("p50", "p99"):
            ours, huey = _start(results, "ours", run, stat), _start(results, "huey", run, stat)
            figures = "" if ours is None or huey is None else f" ({ours:.3f} / {huey:.3f} ms)"
            found.append(
                Target(
                    f"start {stat} at {where}: ours / Huey + Redis's{figures}",
                    _over(ours, huey),
                    1.0,
                    at_most=True,
                    unit="x",
                )
            )
    plain = results.get("plain", {})
    found.append(
        Target(
            "plain .delay() end to end: ours / Huey + Redis's",
            _over(
                plain.get("ours", {}).get("end_to_end_per_second"),
                plain.get("huey", {}).get("end_to_end_per_second"),
            ),
            TARGET_PLAIN_OVER_HUEY,
            unit="x",
        )
    )
    return found


def floor_ratios(results: dict[str, Any]) -> list[tuple[str, float | None]]:
    """Each figure of ours over the floor's (the same hops, no logic): jobs/s as
    a share of the floor's, latency as times the floor's."""
    floor = results.get("durable", {}).get("floor", {})

    def rate(block: dict[str, Any] | None) -> float | None:
        return None if not block else float(block["per_second"])

    plain = results.get("plain", {}).get("ours", {}).get("end_to_end_per_second")
    threads = int(results.get("threads", 8))
    rows: list[tuple[str, float | None]] = [
        (
            "guaranteed one at a time, jobs/s",
            _over(_rate(results, "ours", "one"), rate(floor.get("one"))),
        ),
        (
            f"guaranteed {threads} threads, jobs/s",
            _over(_rate(results, "ours", "threads"), rate(floor.get("threads"))),
        ),
        ("plain .delay() end to end, jobs/s", _over(plain, rate(floor.get("plain")))),
    ]
    for stat in ("p50", "p99"):
        rows.append((f"low-load start {stat}, ms", _low_load_over(results, "ours", "floor", stat)))
    return rows


def _low_load_over(results: dict[str, Any], top: str, bottom: str, stat: str) -> float | None:
    """``top``'s low-load start ``stat`` over ``bottom``'s (None if one is missing)."""
    return _over(_start(results, top, "low_load", stat), _start(results, bottom, "low_load", stat))


def floor_reach(results: dict[str, Any]) -> list[tuple[str, float | None, float, bool]]:
    """What the hops alone reach against each target: the floor's figure over the
    best peer's (jobs/s) or Huey's (low-load start), beside the target. A target
    the floor does not reach in the same run cannot be met on this machine by
    any logic over these hops: only fewer hops, or a cheaper sync, would."""
    floor = results.get("durable", {}).get("floor", {})
    threads = int(results.get("threads", 8))
    rows: list[tuple[str, float | None, float, bool]] = []
    for mode, goal, what in (
        ("one", TARGET_ONE, "guaranteed one at a time: floor / best peer"),
        ("threads", TARGET_THREADS, f"guaranteed {threads} threads: floor / best peer"),
    ):
        best = best_peer(results, mode)
        block = floor.get(mode)
        rate = None if not block else float(block["per_second"])
        rows.append((what, _over(rate, best and best[1]), goal, False))
    for stat in ("p50", "p99"):
        label = f"low-load start {stat}: floor / Huey + Redis"
        rows.append((label, _low_load_over(results, "floor", "huey", stat), 1.0, True))
    return rows


def floor_reach_lines(results: dict[str, Any]) -> list[str]:
    """:func:`floor_reach` as printed: each ratio, its target, and whether the floor
    itself gets there."""
    lines = []
    for label, value, goal, at_most in floor_reach(results):
        if value is None:
            verdict = "not measured"
        else:
            reached = value <= goal if at_most else value >= goal
            verdict = "the floor reaches it" if reached else "above what the hops allow here"
        sign = "<=" if at_most else ">="
        lines.append(f"  {label:46}{_times(value):>8}  (target {sign} {goal:.2f}x: {verdict})")
    return lines


def _cell(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def table(results: dict[str, Any]) -> list[str]:
    """The durable throughput table, the plain figures and the latency table."""
    threads = int(results.get("threads", 8))
    lines = [
        f"durable, each send stored before it returns: jobs/s end to end, "
        f"{int(results.get('jobs', 0)):,} no-op jobs, 2 worker processes",
        f"{'':44}{'one at a time':>15}{f'{threads} threads':>13}",
    ]
    skipped = results.get("skipped", {})
    for name, label in PEERS.items():
        if name in skipped:
            lines.append(f"{label:44}{'skipped':>15}{'skipped':>13}")
            continue
        one, many = _rate(results, name, "one"), _rate(results, name, "threads")
        lines.append(f"{label:44}{_cell(one):>15}{_cell(many):>13}")
    floor = results.get("durable", {}).get("floor", {})
    for key, label in (
        ("one", "floor (same hops, no logic)"),
        ("plain", "floor, not waiting for ACKs"),
    ):
        if key in floor:
            other = floor.get("threads", {}).get("per_second") if key == "one" else None
            lines.append(f"{label:44}{_cell(floor[key]['per_second']):>15}{_cell(other):>13}")
    ours_one, ours_many = _rate(results, "ours", "one"), _rate(results, "ours", "threads")
    for name in PEERS:
        if name != "ours" and name not in skipped:
            lines.append(
                f"{'ours over ' + PEERS[name].split(',')[0]:44}"
                f"{_times(_over(ours_one, _rate(results, name, 'one'))):>15}"
                f"{_times(_over(ours_many, _rate(results, name, 'threads'))):>13}"
            )
    plain = results.get("plain", {})
    if plain:
        lines.append("")
        lines.append("plain .delay() end to end (not waiting for storage), jobs/s:")
        for name, label in (
            ("ours", "ours, journal sync full"),
            ("huey", "Huey + Redis, persistence off"),
        ):
            if name in plain:
                lines.append(f"  {label:42}{_cell(plain[name]['end_to_end_per_second']):>15}")
    lat = results.get("latency")
    if lat:
        lines.append("")
        lines.append("start latency (.delay() -> job starts, UDP probe), ms p50 / p99")
        rows = [
            ("Huey + Redis, low load", "huey", "low_load"),
            ("Huey + Redis, half its peak", "huey", "half_peak"),
            ("ours, low load", "ours", "low_load"),
            ("ours, at half Huey's peak", "ours", "half_peak"),
            ("ours guarantee=True, low load", "ours", "guaranteed_low_load"),
            ("floor, low load", "floor", "low_load"),
        ]
        for label, system, run in rows:
            block = lat.get(system, {}).get(run)
            if block:
                start = block["start"]
                rate = block.get("jobs_per_second")
                at = f"  ({rate:,.0f} jobs/s)" if rate else ""
                lines.append(f"  {label:42}{start['p50']:>8.3f} / {start['p99']:.3f}{at}")
        if "peak" in lat.get("huey", {}):
            lines.append(f"  Huey's peak: {lat['huey']['peak']['jobs_per_second']:,.0f} jobs/s")
    return lines


def run_line(number: int, total: int, results: dict[str, Any]) -> str:
    """One run's ratios, in the order of :func:`targets` (its own verdicts beside)."""
    cells = []
    for target in targets(results):
        value = "-" if target.value is None else f"{target.value:.2f}x"
        cells.append(f"{value}{'' if target.met else '!' if target.met is False else '?'}")
    return f"run {number}/{total}: " + " ".join(cells) + "  (! not met, ? not measured)"


def print_report(results: dict[str, Any]) -> None:
    """The skip lines, the tables, ours against the floor, and the verdicts."""
    print()
    for line in skip_lines(results.get("skipped", {})):
        print(line)
    for line in table(results):
        print(line)
    print("\nours against the floor (jobs/s: share of the floor's; latency: times the floor's):")
    for label, value in floor_ratios(results):
        print(f"  {label:40}{_times(value):>10}")
    print("\nwhat the hops allow (the floor, no logic, against the same peers):")
    for line in floor_reach_lines(results):
        print(line)
    runs = len(results.get("runs", [])) or 1
    where = "same run" if runs == 1 else f"medians of {runs} runs, each figure's own"
    print(f"\ntargets (issue 32), {where}:")
    for target in targets(results):
        print(f"  {target.line()}")
