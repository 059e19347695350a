"""ROUTER_SHOW_JOBS: the jobs handed out, running (per the job manager's RUNNING) or
not, oldest first, at most a limit of them, with the job's name from its body."""

from __future__ import annotations

from django_eventmq.protocol import parse_headers
from django_eventmq.router.admin_socket import show_jobs
from django_eventmq.router.book import Book
from django_eventmq.router.journal.store import MEMORY, Journal
from tests.router.test_router import make_settings

BODY = b'["run",{"callable":"send","path":"shop.jobs","args":[],"kwargs":{}}]'


def book_with_jobs(count: int) -> Book:
    book = Book(
        make_settings(),
        Journal(MEMORY),
        deliver=lambda worker, job: None,
        to_client=lambda identity, message: None,
    )
    for name in (b"ours", b"reference"):
        book.routing.add_worker(name, ((10, "q"),), 0.0)
        for _ in range(count // 2):
            book.reports.ready(name, 0.0)
    for n in range(count):
        msgid = f"m{n}"
        frames = [b"", b"eMQP/1.0", b"REQUEST", msgid.encode(), b"q", b"", BODY]
        assert book.accept(b"client", frames, msgid, "q", parse_headers(""), float(n))
    return book


def test_running_prefetched_and_handed_out_rows_oldest_first() -> None:
    book = book_with_jobs(4)
    workers = book.routing.workers
    by_worker = {w: [j.msgid for j in workers[w].inflight] for w in workers}
    assert by_worker == {b"ours": ["m0", "m2"], b"reference": ["m1", "m3"]}
    # Our job manager said m2 runs in pid 77 since 0.5 (router clock); m0 waits there.
    workers[b"ours"].running = {"m2": (77, 0.5)}
    answer = show_jobs(book.routing, now=10.0)
    rows = {row["msgid"]: row for row in answer["jobs"]}
    assert answer["total"] == 4
    assert [row["msgid"] for row in answer["jobs"]] == ["m0", "m2", "m1", "m3"]
    assert (rows["m2"]["state"], rows["m2"]["pid"], rows["m2"]["age"]) == ("running", 77, 9.5)
    assert (rows["m0"]["state"], rows["m0"]["pid"]) == ("prefetched", None)
    assert (rows["m1"]["state"], rows["m1"]["pid"]) == ("handed_out", None)  # no RUNNING
    assert {row["job"] for row in answer["jobs"]} == {"shop.jobs.send"}
    assert {row["queue"] for row in answer["jobs"]} == {"q"}


def test_at_most_the_limit_of_rows_and_the_total() -> None:
    answer = show_jobs(book_with_jobs(6).routing, now=10.0, limit=2)
    assert [row["msgid"] for row in answer["jobs"]] == ["m0", "m1"]
    assert answer["total"] == 6
