"""A job manager (worker children are real processes) sends PARTIALs to a stand-in router.

PARTIAL goes only to a router whose FEATURES said ``"partial"``, only for jobs
that asked for a reply, always before the job's DONE, at most PARTIAL_RATE a
second per job (a chatty job is coalesced to its latest report).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django_eventmq.protocol import Done, Partial, Reply
from tests.fake_router import FakeRouter, body
from tests.jobs_fixtures.record_hooks import read_records
from tests.jobs_fixtures.running import payload, running, settings_for
from tests.support import wait_for

JOBS = "tests.system.streaming.jobs"


def settings(router: FakeRouter, **options: Any) -> Any:
    return settings_for(router, job_modules=(JOBS,), **options)


def handshake_with_partial(router: FakeRouter) -> bytes:
    """ACK the INFORM and announce FEATURES with ``partial``, as our router does."""
    identity, _ = router.handshake(features=True, heartbeat=False)
    return identity


def partials_then_done(router: FakeRouter, identity: bytes, msgid: str) -> tuple[list[Any], Done]:
    """The values of ``msgid``'s PARTIALs that came before its DONE, in order, and the DONE.

    Fails if a PARTIAL of ``msgid`` came after its DONE.
    """

    def done() -> Done | None:
        router.pump(0.05)
        found = [m for _, m in router.received if isinstance(m, Done) and m.job_msgid == msgid]
        return found[0] if found else None

    final: Done = wait_for(done, 30, f"DONE of {msgid}")
    router.pump(0.2)  # anything sent after the DONE would be here now
    values: list[Any] = []
    seen_done = False
    for ident, message in router.received:
        if message is final:
            seen_done = True
        elif isinstance(message, Partial) and message.job_msgid == msgid:
            assert not seen_done, "a PARTIAL came after the DONE"
            assert ident == identity
            values.append(message.value)
    return values, final


def is_ordered_subsequence(got: list[Any], expected: list[Any]) -> bool:
    it = iter(expected)
    return all(any(item == candidate for candidate in it) for item in got)


def test_partials_reach_a_router_that_speaks_them_before_the_done(router):
    with running(settings(router)):
        identity = handshake_with_partial(router)
        msgid = router.request(identity, body("count_up", "a", 5, 0.08, path=JOBS), reply=True)
        values, done = partials_then_done(router, identity, msgid)
    expected = [{"label": "a", "i": i} for i in range(5)]
    assert done.status == "ok" and payload(done) == {"value": {"label": "a", "total": 5}}
    # Paced below the rate, so normally all five; a loaded machine may coalesce
    # some, but never reorders them and never loses the last one.
    assert values and values[-1] == expected[-1]
    assert is_ordered_subsequence(values, expected)


def test_a_chatty_job_is_coalesced_and_its_last_report_still_arrives(router):
    with running(settings(router)):
        identity = handshake_with_partial(router)
        msgid = router.request(identity, body("chatty", 5000, path=JOBS), reply=True)
        values, done = partials_then_done(router, identity, msgid)
    assert payload(done) == {"value": 5000}
    assert values[-1] == 4999
    assert values == sorted(values)
    assert len(values) < 500  # 5,000 reports in all


def test_no_partial_to_a_router_without_the_feature(router):
    with running(settings(router)):
        identity, _ = router.handshake(features=True, without=("partial",))
        msgid = router.request(identity, body("count_up", "b", 3, path=JOBS), reply=True)
        _, done = router.expect(Done, job_msgid=msgid, timeout=30)
        assert payload(done) == {"value": {"label": "b", "total": 3}}
        assert router.count(Partial) == 0


def test_no_partial_to_a_reference_router(router):
    with running(settings(router)):
        identity, _ = router.handshake()  # no FEATURES: REPLY + READY, as the reference
        msgid = router.request(identity, body("long_job", 2, 0.0, path=JOBS), reply=True)
        _, reply = router.expect(Reply, reply_to=msgid, timeout=30)
        assert payload(reply) == {"value": "finished"}
        assert router.count(Partial) == 0


def test_no_partial_for_a_job_that_asked_for_no_reply(router):
    with running(settings(router)):
        identity = handshake_with_partial(router)
        quiet = router.request(identity, body("count_up", "q", 3, path=JOBS))
        loud = router.request(identity, body("count_up", "l", 2, path=JOBS), reply=True)
        router.expect(Done, job_msgid=quiet, timeout=30)
        values, _ = partials_then_done(router, identity, loud)
    assert values[-1] == {"label": "l", "i": 1}
    assert all(m.job_msgid == loud for _, m in router.received if isinstance(m, Partial))


def test_progress_goes_into_the_records_in_batches(router, tmp_path: Path, monkeypatch):
    records_file = tmp_path / "records.jsonl"
    monkeypatch.setenv("EMQ_TEST_RECORDS_FILE", str(records_file))
    release = tmp_path / "release"
    with running(settings(router), hooks="tests.jobs_fixtures.record_hooks"):
        identity = handshake_with_partial(router)
        msgid = router.request(
            identity, body("hold_at", str(release), "one", path=JOBS), reply=True
        )

        def progress_recorded() -> list[Any]:
            return [r.get("progress") for r in read_records(records_file) if r["msgid"] == msgid]

        # Recorded while the job still runs (it waits for the release file).
        wait_for(lambda: {"at": "one"} in progress_recorded(), 20, "the progress record")
        release.touch()
        router.expect(Done, job_msgid=msgid, timeout=30)
        wait_for(
            lambda: (
                [r["status"] for r in read_records(records_file) if r["msgid"] == msgid][-1:]
                == ["succeeded"]
            ),
            20,
            "the final record",
        )
    mine = [r for r in read_records(records_file) if r["msgid"] == msgid]
    with_progress = [(r["status"], r["progress"]) for r in mine if "progress" in r]
    assert with_progress == [
        ("running", {"at": "one"}),
        ("running", {"at": "one released"}),
    ]
    assert mine[0]["status"] == "running" and "progress" not in mine[0]  # started first
    assert mine[-1]["status"] == "succeeded"
