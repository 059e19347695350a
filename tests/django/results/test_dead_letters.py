"""Dead letters: recorded beside a given-up job's results row, shown, filtered, retried and
purged in the admin; the routers' poisoned jobs on the same page (a router in a thread),
handed out again or purged there; an unreachable router leaves the table part whole."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
from django.utils import timezone

from django_eventmq import dead_letters
from django_eventmq.jobmanager.outcomes import Recorder
from django_eventmq.models.dead_letters import DeadLetter
from django_eventmq.models.results import JobResult
from django_eventmq.protocol import parse_job
from django_eventmq.protocol.status import JobStatus
from django_eventmq.result_recording import record_results
from tests.django.results.conftest import receive_request
from tests.router.test_router import Harness, Peer
from tests.support import result_record, tcp_addr

pytestmark = pytest.mark.django_db
CHANGELIST = "/admin/django_eventmq/deadletter/"
POISONED = CHANGELIST + "poisoned/"
ADD = "tests.django.results.jobs.add"
BOOM = {"type": "ValueError", "message": "boom", "traceback": "Traceback: line 7 in add"}


def dead(msgid: str, status: str = "failed", **extra: Any) -> DeadLetter:
    record = result_record(msgid, status, job=ADD, args=[1, 2], attempt=3, error=BOOM)
    record_results([{**record, **extra}])
    return DeadLetter.objects.get(msgid=msgid)


@pytest.fixture(autouse=True)
def _no_router(eventmq_settings: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """No router listens at ADMIN_ADDR unless a test starts one (and says where); the
    page waits 0.2 s for one, not 1 s."""
    eventmq_settings(ADMIN_ADDR=tcp_addr())
    monkeypatch.setattr(dead_letters, "ROUTER_TIMEOUT", 0.2)


@pytest.fixture
def admin_client(client: Any, django_user_model: Any) -> Any:
    """A logged-in superuser (without a password: hashing one costs a second a test)."""
    user = django_user_model.objects.create(username="root", is_staff=True, is_superuser=True)
    client.force_login(user)
    return client


# -- recording -----------------------------------------------------------------------------
def test_a_job_given_up_is_kept_as_a_dead_letter_with_what_a_retry_needs() -> None:
    letter = dead("d-1", kwargs={"c": 3}, queue="email", options={"timeout": 30, "priority": 5})
    assert (letter.reason, letter.queue, letter.job) == ("failed", "email", ADD)
    assert (letter.args, letter.kwargs, letter.headers) == (
        [1, 2],
        {"c": 3},
        {"timeout": 30, "priority": 5},
    )
    assert (letter.exc_type, letter.exc_message, letter.attempts) == ("ValueError", "boom", 3)
    assert "line 7" in letter.traceback and letter.jobmanager == "jm-1"
    assert dead("d-2", status="timed_out").reason == "timed_out"
    dead("d-1")  # the same record again: still one letter
    assert DeadLetter.objects.filter(msgid="d-1").count() == 1


def test_a_job_managers_record_of_a_job_given_up_brings_its_options() -> None:
    recorder = Recorder("jm-1")
    body = '["run", {"path": "shop.jobs", "callable": "send", "args": [7], "kwargs": {}}]'
    recorder.add(
        msgid="d-1", queue="email", body_text=body, status=JobStatus.FAILED, attempt=2,
        pid=9, started=1.0, finished=2.0, error=BOOM, now=0.0, options={"timeout": 30},
    )  # fmt: skip
    record_results(recorder.take(0.0))
    letter = DeadLetter.objects.get(msgid="d-1")
    assert (letter.job, letter.args, letter.headers) == ("shop.jobs.send", [7], {"timeout": 30})


def test_jobs_not_given_up_are_no_dead_letters() -> None:
    record_results(
        [
            result_record("r-1", "retrying", job=ADD, args=[], error=BOOM),
            result_record("s-1", "succeeded", job=ADD, args=[]),
            result_record("c-1", "cancelled", job=ADD, args=[]),
        ]
    )
    record_results([result_record("x-1", "failed", job=ADD, args=[])], from_worker=False)
    assert JobResult.objects.count() == 4 and not DeadLetter.objects.exists()


def test_a_job_a_router_set_aside_is_failed_but_no_dead_letter() -> None:
    """Its router's journal keeps it (poisoned): the page lists it from there, once."""
    died = {"type": "WorkerDied", "message": "worker process pid=7 exited; set aside"}
    record_results([result_record("p-1", "failed", job=ADD, args=[], error=died, poisoned=True)])
    assert JobResult.objects.get(msgid="p-1").status == "failed"
    assert not DeadLetter.objects.exists()


def test_a_dead_letter_outlives_its_results_row() -> None:
    dead("d-1")
    JobResult.objects.all().delete()  # emq_purge_results
    assert DeadLetter.objects.filter(msgid="d-1").exists()


def test_the_status_line_counts_dead_letters_by_reason() -> None:
    assert dead_letters.count_line() == "dead letters: 0 in the results table"
    dead("d-1")
    dead("d-2")
    dead("d-3", status="timed_out")
    line = dead_letters.count_line()
    assert line == "dead letters: 3 (2 failed, 1 timed out) in the results table"


# -- the admin: list, filters, detail, retry, purge ------------------------------------------
def test_the_list_filters_by_reason_queue_job_and_search(admin_client: Any) -> None:
    dead("alpha-1", queue="email")
    dead("beta-2", status="timed_out", job="tests.django.results.jobs.marker")
    page = admin_client.get(CHANGELIST + "?reason__exact=timed_out").content.decode()
    assert "beta-2" in page and "alpha-1" not in page
    page = admin_client.get(CHANGELIST + "?queue__exact=email").content.decode()
    assert "alpha-1" in page and "beta-2" not in page
    page = admin_client.get(CHANGELIST + "?job__exact=" + ADD).content.decode()
    assert "alpha-1" in page and "beta-2" not in page
    page = admin_client.get(CHANGELIST + "?q=beta-2").content.decode()
    assert "beta-2" in page and "alpha-1" not in page


def test_the_detail_page_shows_traceback_and_arguments_and_edits_nothing(
    admin_client: Any,
) -> None:
    letter = dead("d-1", kwargs={"c": 3})
    response = admin_client.get(f"{CHANGELIST}{letter.pk}/change/")
    page = response.content.decode()
    assert response.status_code == 200
    assert "Traceback: line 7 in add" in page and "&quot;c&quot;: 3" in page
    assert 'name="_save"' not in page
    assert admin_client.get(CHANGELIST + "add/").status_code == 403


def act(admin_client: Any, action: str, *letters: DeadLetter) -> str:
    response = admin_client.post(
        CHANGELIST,
        {"action": action, "_selected_action": [letter.pk for letter in letters]},
        follow=True,
    )
    return response.content.decode()  # type: ignore[no-any-return]


def test_retry_sends_the_job_again_with_its_options_and_a_new_msgid(
    admin_client: Any, broker: Any
) -> None:
    letter = dead("d-1", kwargs={"c": 3}, options={"timeout": 30, "priority": 5, "bogus": 1})
    assert "Sent 1 job(s) again" in act(admin_client, "retry", letter)
    _identity, request = receive_request(broker)
    body = parse_job(request.body_text)
    assert (body.name, list(body.args), dict(body.kwargs)) == (ADD, [1, 2], {"c": 3})
    assert request.msgid != "d-1" and request.headers.reply_requested
    assert (request.headers.timeout, request.headers.priority) == (30, 5)
    letter.refresh_from_db()
    assert (letter.retried_msgid, letter.retries) == (request.msgid, 1)
    assert letter.retried is not None
    # The retry dies too: its own dead letter names the one it came from.
    assert dead(request.msgid).retry_of == "d-1"


def test_retry_sends_the_jobs_decorator_options_when_none_were_recorded(
    admin_client: Any, broker: Any
) -> None:
    letter = dead("d-1", job="tests.django.results.jobs.sleeps_too_long", args=["/p"])
    act(admin_client, "retry", letter)
    _identity, request = receive_request(broker)
    assert (request.headers.timeout, request.headers.reply_requested) == (1, True)


def test_retry_with_no_router_says_so_and_records_nothing(
    admin_client: Any, eventmq_settings: Callable[..., Any]
) -> None:
    eventmq_settings(BROKER_ADDR=tcp_addr(), SEND_TIMEOUT=0.2, ACK_TIMEOUT=0.2, ACK_RETRIES=1)
    letter = dead("d-1")
    assert "Could not send the jobs again" in act(admin_client, "retry", letter)
    letter.refresh_from_db()
    assert (letter.retries, letter.retried_msgid) == (0, "")


def test_retry_of_a_letter_naming_no_job_says_so(admin_client: Any, broker: Any) -> None:
    letter = dead("d-1", job="")
    assert "dead letter d-1 names no job" in act(admin_client, "retry", letter)
    letter.refresh_from_db()
    assert letter.retries == 0


def test_purge_deletes_the_selected_dead_letters(admin_client: Any) -> None:
    keep, gone = dead("keep-1"), dead("gone-1")
    assert "Purged 1 dead letter(s)" in act(admin_client, "purge", gone)
    assert list(DeadLetter.objects.values_list("msgid", flat=True)) == [keep.msgid]


def test_a_viewer_without_change_or_delete_permission_cannot_retry_or_purge(
    client: Any, django_user_model: Any
) -> None:
    from django.contrib.auth.models import Permission

    user = django_user_model.objects.create(username="viewer", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_deadletter"))
    client.force_login(user)
    letter = dead("d-1")
    page = client.get(CHANGELIST).content.decode()
    assert "d-1" in page and 'value="retry"' not in page and 'value="purge"' not in page
    assert client.post(POISONED, {"do": "retry", "job": "x y"}).status_code == 403
    act(client, "purge", letter)
    assert DeadLetter.objects.filter(msgid="d-1").exists()


# -- the routers' poisoned jobs ----------------------------------------------------------------
def test_an_unreachable_router_leaves_the_table_part_whole_with_a_clear_message(
    admin_client: Any,
) -> None:
    dead("d-1")
    response = admin_client.get(CHANGELIST)
    page = response.content.decode()
    assert response.status_code == 200 and "d-1" in page
    assert "Could not read the poisoned jobs of a router" in page
    assert "no answer to STATUS" in page


def test_a_router_that_does_not_answer_a_retry_or_purge_is_said_so(
    admin_client: Any, eventmq_settings: Callable[..., Any]
) -> None:
    silent = tcp_addr()
    eventmq_settings(ADMIN_ADDR=silent)
    for do in ("retry", "purge"):
        page = admin_client.post(POISONED, {"do": do, "job": [f"{silent} m"]}, follow=True)
        assert f"The router did not answer: no answer to POISONED_{do.upper()}" in (
            page.content.decode()
        )
    page = admin_client.post(POISONED, {"do": "retry"}, follow=True).content.decode()
    assert "No poisoned job was selected" in page


def poison(h: Harness, worker: Peer, body: str = "") -> str:
    """A job whose worker dies twice (the router's poison_after=2): set aside."""
    client = h.peer("frontend", "client")
    job = body or json.dumps(
        [
            "run",
            {"path": "tests.django.results.jobs", "callable": "add", "args": [4, 5], "kwargs": {}},
        ]
    )
    msgid = client.send("REQUEST", "email", "guarantee,timeout:9", job)
    assert client.expect("ACK")[2] == msgid
    for _ in range(2):
        assert worker.expect("REQUEST")[1] == msgid
        worker.send("DONE", msgid, "died", "worker process exited with signal 9")
    client.expect("REJECT")
    return msgid


Poisoning = tuple[Harness, Peer, str]


@pytest.fixture
def poisoning(
    start_router: Callable[..., Harness], eventmq_settings: Callable[..., Any]
) -> Poisoning:
    """The site's router, its one worker, and a job it set aside as poisoned."""
    h = start_router(poison_after=2)
    eventmq_settings(ADMIN_ADDR=h.router.admin_address)
    worker = h.worker("w", queues='[[10, "email"]]')
    return h, worker, poison(h, worker)


def test_the_routers_poisoned_jobs_are_listed_and_filtered_on_the_same_page(
    admin_client: Any, poisoning: Poisoning
) -> None:
    h, _worker, msgid = poisoning
    dead("d-1")
    page = admin_client.get(CHANGELIST).content.decode()
    assert "d-1" in page and msgid in page
    assert "Poisoned jobs held by the routers (1)" in page
    assert "tests.django.results.jobs.add" in page and "timeout:9" in page
    assert f'value="{h.router.admin_address} {msgid}"' in page
    assert msgid not in admin_client.get(CHANGELIST + "?queue__exact=default").content.decode()
    assert msgid in admin_client.get(CHANGELIST + "?queue__exact=email").content.decode()
    assert msgid not in admin_client.get(CHANGELIST + "?reason__exact=failed").content.decode()
    today = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    for start, shown in ((today, True), (today - timedelta(days=3), False)):
        window = {"created__gte": start, "created__lt": start + timedelta(days=1)}
        page = admin_client.get(CHANGELIST + "?" + urlencode(window)).content.decode()
        assert (msgid in page) is shown


def on_poisoned(admin_client: Any, do: str, h: Harness, msgid: str) -> str:
    """Tick ``msgid`` of router ``h`` and press the ``do`` button; the page shown after."""
    choice = f"{h.router.admin_address} {msgid}"
    page = admin_client.post(POISONED, {"do": do, "job": [choice]}, follow=True)
    return page.content.decode()  # type: ignore[no-any-return]


def test_a_poisoned_job_handed_out_again_from_the_admin_reaches_a_worker(
    admin_client: Any, poisoning: Poisoning
) -> None:
    h, worker, msgid = poisoning
    assert "1 poisoned job(s) handed out again" in on_poisoned(admin_client, "retry", h, msgid)
    assert worker.expect("REQUEST")[1] == msgid
    assert h.ask("STATUS")["poisoned_messages"] == []


def test_a_purged_poisoned_job_is_gone_from_the_router(
    admin_client: Any, poisoning: Poisoning
) -> None:
    h, _worker, msgid = poisoning
    assert "1 poisoned job(s) purged" in on_poisoned(admin_client, "purge", h, msgid)
    status = h.ask("STATUS")
    assert (status["poisoned_messages"], status["poisoned_messages_total"]) == ([], 0)
    assert "were no longer poisoned there" in on_poisoned(admin_client, "purge", h, msgid)


def test_only_the_sites_own_routers_are_asked(admin_client: Any, poisoning: Poisoning) -> None:
    page = admin_client.post(POISONED, {"do": "purge", "job": [f"{tcp_addr()} m"]}, follow=True)
    assert "is not one of this site&#x27;s routers" in page.content.decode()


def test_a_site_without_the_routers_admin_token_is_refused_and_nothing_changes(
    admin_client: Any, poisoning: Poisoning, eventmq_settings: Callable[..., Any], tmp_path: Any
) -> None:
    """The dashboard sends the token it can read; a router it cannot prove itself to
    refuses the purge, the page says why, and the job stays set aside."""
    h, _worker, msgid = poisoning
    elsewhere = str(tmp_path / "not-the-routers.token")
    eventmq_settings(ADMIN_ADDR=h.router.admin_address, ADMIN_TOKEN_FILE=elsewhere)
    page = on_poisoned(admin_client, "purge", h, msgid)
    assert "Not done" in page and "without the admin token" in page, page
    assert h.ask("STATUS")["poisoned_messages_total"] == 1
